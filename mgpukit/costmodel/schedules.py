"""Pipeline schedules as pure data: who runs which forward/backward, in what order.

A pipeline splits the model's layers into stages, one rank per stage, and the batch into
``m`` micro-batches. A *schedule* is just the order in which each rank runs its work. Here it
is a plain table — ``table[rank]`` is a list of :class:`Action` — with no torch inside, so
the same table can be printed, simulated (``mgpukit.costmodel.simulate``), checked against
``torch.distributed.pipelining`` (``mgpukit.strategies.pipeline.torch_order``) or executed by
a runtime. The vocabulary — schedule names, :class:`Action`, ``Table`` — lives one layer down in
``mgpukit.costmodel.actions``, which the simulator imports too.

Actions:

- ``F``: forward of one micro-batch through one stage;
- ``B``: full backward (input-grad and weight-grad together);
- ``I`` / ``W``: the backward split in two (zero-bubble schedules): ``I`` computes the
  gradient w.r.t. the stage's input — the next-upstream stage waits for it — and ``W`` the
  gradient w.r.t. the weights, which nobody waits for until the optimizer step.

The *bubble* is the fraction of rank-time spent idle. With equal stage costs:

==============  ===========================  ========================================
schedule        bubble                       activations held per rank (max)
==============  ===========================  ========================================
naive           (p-1)/p                      1
gpipe           (p-1)/(m+p-1)                m
1f1b            (p-1)/(m+p-1)                p - rank
interleaved     (p-1)/(v·m+p-1)              (v-1)·p + 2(p-1-rank) + 1 chunks, ≤ v·m
zb-h1           (p-1)/(3m+p-1) if F=I=W      p  (W pending; same peak as 1F1B)
==============  ===========================  ========================================
"""

from __future__ import annotations

from mgpukit.costmodel.actions import KINDS, SCHEDULES, Action, Table, num_stages  # noqa: F401  (re-exported)
from mgpukit.costmodel.simulate import simulate

# ---------------------------------------------------------------------------- builders


def build_schedule(name: str, p: int, m: int, v: int = 1) -> Table:
    """Return the per-rank action order of schedule ``name`` for ``p`` ranks, ``m`` micro-batches.

    ``v`` is the number of model chunks per rank (only ``"interleaved"`` uses it); the model
    then has ``p·v`` virtual stages and stage ``s`` lives on rank ``s % p``.
    """
    for arg, value in (("p", p), ("m", m), ("v", v)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg} must be a positive integer, got {value!r}; use {arg} >= 1.")
    if name not in _BUILDERS:
        raise ValueError(f"Unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}.")
    if name == "interleaved":
        if m % p:
            lower, upper = (m // p) * p, (m // p + 1) * p
            hint = f"m={upper}" if lower == 0 else f"m={lower} or m={upper}"
            raise ValueError(
                f"'interleaved' needs the number of micro-batches to be a multiple of p "
                f"(as in Megatron-LM); got m={m}, p={p}: use {hint}."
            )
        return _interleaved(p, m, v)
    if v != 1:
        raise ValueError(
            f"v (model chunks per rank) is only used by 'interleaved'; pass v=1 for "
            f"{name!r} or choose name='interleaved'."
        )
    return _BUILDERS[name](p, m)


def _naive(p: int, m: int) -> Table:
    """Model parallel without micro-batching: each batch runs F down then B up the ranks.

    With ``m > 1`` the batches are sequential (F0 B0 F1 B1 ...), so exactly one rank works
    at any time: bubble ``(p-1)/p`` whatever ``m``.
    """
    return [[Action(k, i, r) for i in range(m) for k in ("F", "B")] for r in range(p)]


def _gpipe(p: int, m: int) -> Table:
    """GPipe (Huang et al. 2019, arXiv:1811.06965): all ``m`` forwards, then all backwards.

    Fill and drain each cost ``p-1`` slots: bubble ``(p-1)/(m+p-1)``. Every rank holds the
    activations of all ``m`` micro-batches at the F→B turn.
    """
    return [[Action("F", i, r) for i in range(m)] + [Action("B", i, r) for i in range(m)]
            for r in range(p)]


def _one_f_one_b(p: int, m: int) -> Table:
    """1F1B / PipeDream-Flush (Narayanan et al. 2019, 2021, arXiv:2104.04473).

    Rank ``r`` runs ``p-1-r`` warm-up forwards, then alternates one forward with one
    backward (steady state), then drains the remaining backwards (cool-down). Same bubble as
    GPipe, ``(p-1)/(m+p-1)``, but a rank never holds more than ``p-r`` micro-batches.
    """
    table = []
    for r in range(p):
        warmup = min(p - 1 - r, m)
        ops = [Action("F", i, r) for i in range(warmup)]
        for i in range(m - warmup):  # steady: the next forward, then the oldest backward
            ops += [Action("F", warmup + i, r), Action("B", i, r)]
        ops += [Action("B", i, r) for i in range(m - warmup, m)]
        table.append(ops)
    return table


def _interleaved(p: int, m: int, v: int) -> Table:
    """Interleaved 1F1B (Narayanan et al. 2021, §2.2): ``v`` model chunks per rank.

    Rank ``r`` holds stages ``r, r+p, …, r+(v-1)p``. Micro-batches go through the chunks in
    groups of ``p`` (depth first), so the pipeline fills after ``p-1`` *chunk* slots, each
    ``1/v`` of a stage: bubble ``(p-1)/(v·m+p-1)``, paid for with ``v``× more p2p messages.
    Warm-up is ``(v-1)·p + 2(p-1-r)`` chunk forwards (Megatron-LM's and PyTorch's count;
    with ``v=1`` this is ``2(p-1-r)``, more than plain 1F1B's ``p-1-r``, as in PyTorch).
    """
    n = m * v  # chunk-forwards (and chunk-backwards) per rank

    def mb(k: int) -> int:  # k-th chunk step -> micro-batch: groups of p, round-robin chunks
        return (k // (p * v)) * p + k % p

    table = []
    for r in range(p):
        fwd = [Action("F", mb(k), ((k // p) % v) * p + r) for k in range(n)]
        bwd = [Action("B", mb(k), (v - 1 - (k // p) % v) * p + r) for k in range(n)]
        warmup = min((v - 1) * p + 2 * (p - 1 - r), n)
        ops = fwd[:warmup]
        for k in range(n - warmup):
            ops += [fwd[warmup + k], bwd[k]]
        ops += bwd[n - warmup:]
        table.append(ops)
    return table


def _zb_h1(p: int, m: int) -> Table:
    """ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241).

    Backward is split into ``I`` (input-grad, on the critical path) and ``W`` (weight-grad,
    off it). The order is 1F1B's with ``B`` → ``I``; rank ``r`` postpones its ``W``s by ``r``
    steps, and the postponed ``W``s fill the cool-down bubble. A rank then holds at most
    ``(p-r) + r = p`` micro-batches, 1F1B's peak. With ``T_F = T_I = T_W`` the bubble shrinks
    from ``(p-1)(T_F+T_I+T_W)`` to ``(p-1)(T_F+T_I-T_W)`` per rank: a third of 1F1B's.
    Identical to PyTorch's ``ScheduleInterleavedZeroBubble`` with one stage per rank.
    """
    table = []
    for r in range(p):
        warmup = min(p - 1 - r, m)
        ops = [Action("F", i, r) for i in range(warmup)]
        next_w = 0
        for k in range(m):  # k-th input-grad
            if warmup + k < m:
                ops.append(Action("F", warmup + k, r))
            ops.append(Action("I", k, r))
            if k >= r:  # W delayed by r steps
                ops.append(Action("W", next_w, r))
                next_w += 1
        ops += [Action("W", i, r) for i in range(next_w, m)]
        table.append(ops)
    return table


_BUILDERS = {"naive": _naive, "gpipe": _gpipe, "1f1b": _one_f_one_b, "zb-h1": _zb_h1,
             "interleaved": _interleaved}


# ---------------------------------------------------------------------------- inspection


def check_table(table: Table, m: int) -> None:
    """Raise ``ValueError`` unless every (stage, micro-batch) has exactly one F and one B or I+W."""
    seen: dict[tuple[int, int], list[str]] = {}
    for ops in table:
        for a in ops:
            seen.setdefault((a.stage, a.microbatch), []).append(a.kind)
    for s in range(num_stages(table)):
        for i in range(m):
            kinds = sorted(seen.pop((s, i), []))
            if kinds not in (["B", "F"], ["F", "I", "W"]):
                raise ValueError(f"stage {s}, micro-batch {i} runs {kinds or 'nothing'}; it needs "
                                 f"exactly one F and either one B or one I and one W.")
    if seen:
        raise ValueError(f"actions for micro-batches outside 0..{m - 1}: {sorted(seen)}")


def max_in_flight(table: Table, rank: int) -> int:
    """Most micro-batches whose forward ran on ``rank`` but whose backward (B or I) has not.

    This is the activation memory the rank must hold, in micro-batches (GPipe: ``m``,
    1F1B: ``p - rank``). For multi-chunk tables it counts (stage, micro-batch) pairs, each
    ``1/v`` of a full stage's activations.
    """
    live, peak = set(), 0
    for a in table[rank]:
        if a.kind == "F":
            live.add((a.stage, a.microbatch))
            peak = max(peak, len(live))
        elif a.kind in ("B", "I"):
            live.discard((a.stage, a.microbatch))
    return peak


def _label(a: Action, p: int, v: int) -> str:
    # one chunk per rank: the stage is the rank, "F3" is enough; else "F3.1" = chunk 1
    return str(a) if v == 1 else f"{a}.{a.stage // p}"


def to_rows(table: Table, *, aligned: bool = False) -> list[list[str]]:
    """One row of labels per rank (``"F0"``, ``"B2"``; ``"F0.1"`` = chunk 1 when v > 1).

    ``aligned=False`` lists each rank's actions in order. ``aligned=True`` places them on a
    time grid where every action takes one slot and ``"."`` is an idle slot (the textbook
    picture; see ``simulate`` for real durations).
    """
    p = len(table)
    v = max(1, -(-num_stages(table) // p))
    if not aligned:
        width = max((len(ops) for ops in table), default=0)
        return [[_label(a, p, v) for a in ops] + [""] * (width - len(ops)) for ops in table]
    # costs are per full stage and a chunk costs 1/v of it, so cost v = one slot per action
    tl = simulate(table, cost_f=v, cost_b=v, cost_i=v, cost_w=v)
    rows = [["."] * round(tl.makespan) for _ in range(p)]
    for ev, a in zip(tl.events, tl.actions):
        rows[ev["rank"]][round(ev["start"])] = _label(a, p, v)
    return rows


def describe(table: Table, *, aligned: bool = True) -> str:
    """Printable grid, one line per rank: ``rank 0 | F0 F1 .  B0 ...``."""
    rows = to_rows(table, aligned=aligned)
    width = max((len(c) for row in rows for c in row), default=1)
    return "\n".join(f"rank {r} | " + " ".join(c.ljust(width) for c in row).rstrip()
                     for r, row in enumerate(rows))
