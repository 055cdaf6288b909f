"""Discrete-event simulation of a pipeline schedule: when does each action run?

Each rank runs its list of actions in order, one at a time, and an action starts as soon as
its rank is free and its inputs exist:

- ``F`` of stage ``s`` needs ``F`` of stage ``s-1`` (same micro-batch): the activation;
- ``B``/``I`` of stage ``s`` needs ``F`` of stage ``s`` (its saved activations) and
  ``B``/``I`` of stage ``s+1`` (the gradient w.r.t. its output);
- ``W`` of stage ``s`` needs ``I`` of stage ``s``.

A dependency produced on another rank arrives ``cost_p2p`` later (the send). Nothing else is
modelled: no memory limits, no overlap of compute with compute.

Cost convention: ``cost_f``, ``cost_b`` (full backward), ``cost_w`` are the time one
micro-batch takes through *one rank's whole share of the model*. A table with ``v`` chunks
per rank (``p·v`` virtual stages) runs each chunk at ``1/v`` of those costs, so interleaving
changes the order, not the total work. A split backward costs ``cost_i + cost_w = cost_b``;
by default ``cost_i = cost_w = cost_b/2``.

With equal stages the simulated bubble reproduces the closed forms exactly (tests):
gpipe and 1f1b ``(p-1)/(m+p-1)``, interleaved ``(p-1)/(v·m+p-1)``, naive ``(p-1)/p``; for
zb-h1 with ``F = I = W`` (``cost_b = 2·cost_f``, the paper's setting) ``(p-1)/(3m+p-1)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mgpukit.costmodel.actions import Action, Table, num_stages
from mgpukit.costmodel.pipeline import bubble_fraction as bubble_formula  # noqa: F401  (its old name here)

EVENT_KIND = {"F": "fwd", "B": "bwd", "I": "bwd_input", "W": "bwd_weight"}


class DeadlockError(RuntimeError):
    """The table's order makes some rank wait for an action that can never run first."""


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """Result of :func:`simulate`.

    ``events`` are timeline records in the kit's result format (docs/ARCHITECTURE.md, "The result record"):
    ``{"rank", "stream": "compute", "kind", "microbatch", "stage", "start", "end"}``, in the
    order they were scheduled; ``actions[k]`` is the :class:`Action` behind ``events[k]``.
    """

    events: list[dict]
    actions: list[Action]
    makespan: float
    busy: list[float]  # per rank: time spent computing
    idle: list[float]  # per rank: makespan - busy
    bubble_fraction: float  # sum(idle) / (p · makespan)

    def span(self, action: Action) -> tuple[float, float]:
        """(start, end) of one action."""
        k = self.actions.index(action)
        return self.events[k]["start"], self.events[k]["end"]


def simulate(table: Table, *, cost_f: float = 1.0, cost_b: float = 2.0,
             cost_w: float | None = None, cost_i: float | None = None,
             cost_p2p: float = 0.0) -> Timeline:
    """Run ``table`` on an idealised machine and return its :class:`Timeline`.

    Raises :class:`DeadlockError` naming the stuck actions when the order cannot be run.
    """
    if cost_w is None:
        cost_w = cost_b / 2
    if cost_i is None:
        cost_i = cost_b - cost_w
    for name, c in (("cost_f", cost_f), ("cost_b", cost_b), ("cost_w", cost_w),
                    ("cost_p2p", cost_p2p)):
        if c < 0:
            raise ValueError(f"{name} must be >= 0, got {c}.")
    if cost_i < 0:
        raise ValueError(f"cost_w={cost_w} exceeds cost_b={cost_b}, leaving a negative "
                         f"cost_i = cost_b - cost_w; pass cost_w <= cost_b.")
    p, n_stages = len(table), num_stages(table)
    scale = p / n_stages if n_stages else 1.0  # a chunk is 1/v of a rank's share
    cost = {"F": cost_f * scale, "B": cost_b * scale, "I": cost_i * scale, "W": cost_w * scale}

    where: dict[Action, int] = {}
    for r, ops in enumerate(table):
        for a in ops:
            if a in where:
                raise ValueError(f"{a.kind}{a.microbatch} of stage {a.stage} appears twice "
                                 f"(ranks {where[a]} and {r}); each action must run once.")
            where[a] = r

    end: dict[Action, float] = {}
    events: list[dict] = []
    actions: list[Action] = []
    clock, busy, nxt = [0.0] * p, [0.0] * p, [0] * p
    progress = True
    while progress:
        progress = False
        for r in range(p):  # run each rank as far as its inputs allow, then the next
            while nxt[r] < len(table[r]):
                a = table[r][nxt[r]]
                deps = _deps(a, n_stages, where)
                if any(d not in end for d in deps):
                    break
                start = max([clock[r]] + [end[d] + (cost_p2p if where[d] != r else 0.0)
                                          for d in deps])
                clock[r] = end[a] = start + cost[a.kind]
                busy[r] += cost[a.kind]
                events.append({"rank": r, "stream": "compute", "kind": EVENT_KIND[a.kind],
                               "microbatch": a.microbatch, "stage": a.stage,
                               "start": start, "end": end[a]})
                actions.append(a)
                nxt[r] += 1
                progress = True

    stuck = [r for r in range(p) if nxt[r] < len(table[r])]
    if stuck:
        raise DeadlockError(_deadlock_message(table, stuck, nxt, n_stages, where, end))
    makespan = max(clock, default=0.0)
    idle = [makespan - b for b in busy]
    bubble = sum(idle) / (p * makespan) if makespan > 0 else 0.0
    return Timeline(events=events, actions=actions, makespan=makespan, busy=busy, idle=idle,
                    bubble_fraction=bubble)


def _deps(a: Action, n_stages: int, where: dict[Action, int]) -> list[Action]:
    """The actions whose outputs ``a`` consumes (see the module docstring)."""
    s, i = a.stage, a.microbatch
    if a.kind == "F":
        return [Action("F", i, s - 1)] if s > 0 else []
    if a.kind == "W":
        return [Action("I", i, s)]
    deps = [Action("F", i, s)]
    if s < n_stages - 1:  # output-grad comes from downstream's I if it split, else its B
        grad = Action("I", i, s + 1)
        deps.append(grad if grad in where else Action("B", i, s + 1))
    return deps


def _deadlock_message(table, stuck, nxt, n_stages, where, end) -> str:
    lines = []
    for r in stuck:
        a = table[r][nxt[r]]
        waits = []
        for d in _deps(a, n_stages, where):
            if d in end:
                continue
            if d in where:
                waits.append(f"{d.kind}{d.microbatch} of stage {d.stage} (rank {where[d]} "
                             f"has it later in its order)")
            else:
                waits.append(f"{d.kind}{d.microbatch} of stage {d.stage} (no rank runs it)")
        lines.append(f"rank {r} is stuck at {a.kind}{a.microbatch} of stage {a.stage}, "
                     f"waiting for " + " and ".join(waits))
    return ("Schedule deadlocks: " + "; ".join(lines) + ". Reorder the actions so that every "
            "input is produced before it is needed, or add the missing actions.")
