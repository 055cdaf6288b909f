"""The bubble of a run, measured from its own timeline.

For each step, the pipeline's *span* runs from the first forward on any rank to the last
backward on any rank; rank ``r`` was busy for the sum of its ``fwd``/``bwd``/``bwd_input``/
``bwd_weight`` events and idle for the rest of the span:

    bubble = Σ_r idle_r / (p · span) = 1 - Σ_r busy_r / (p · span)

— the same definition as the schedule simulator's (``mgpukit.costmodel.simulate``), so a
measured (or emulated) bubble and a predicted one can be compared directly. The optimizer
step is outside the span: it is not part of the schedule.
"""
from __future__ import annotations

import statistics

import torch
import torch.distributed as dist
from mgpukit.costmodel.schedules import build_schedule
from mgpukit.costmodel.simulate import simulate

PIPELINE_KINDS = ("fwd", "bwd", "bwd_input", "bwd_weight")


def rank_spans(events: list[dict], steps: int) -> list[tuple[float, float, float]]:
    """Per step: (first start, last end, busy seconds) of this rank's pipeline actions."""
    out = []
    for step in range(steps):
        evs = [e for e in events if e["stream"] == "compute" and e["kind"] in PIPELINE_KINDS
               and e.get("step") == step]
        if not evs:
            out.append((float("inf"), float("-inf"), 0.0))
            continue
        out.append((min(e["start"] for e in evs), max(e["end"] for e in evs),
                    sum(e["end"] - e["start"] for e in evs)))
    return out


def bubble_from_spans(spans_by_rank: list[list[tuple[float, float, float]]]) -> dict:
    """Bubble per step and its summary from every rank's ``rank_spans``.

    ``bubble_fraction`` is the mean over steps, skipping the first step when there are others
    (warm-up, as for the step time in the result record)."""
    p = len(spans_by_rank)
    steps = len(spans_by_rank[0]) if p else 0
    per_step, idle, busy, span_s = [], [], [], []
    for k in range(steps):
        start = min(r[k][0] for r in spans_by_rank)
        end = max(r[k][1] for r in spans_by_rank)
        span = end - start
        b = [r[k][2] for r in spans_by_rank]
        per_step.append(1 - sum(b) / (p * span) if span > 0 else 0.0)
        idle.append([span - x for x in b])
        busy.append(b)
        span_s.append(span)
    keep = list(range(1, steps)) if steps > 1 else list(range(steps))

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    return {
        "bubble_fraction": mean([per_step[k] for k in keep]),
        "bubble_per_step": per_step,
        "span_s": mean([span_s[k] for k in keep]),
        "idle_s": [mean([idle[k][r] for k in keep]) for r in range(p)],
        "busy_s": [mean([busy[k][r] for k in keep]) for r in range(p)],
    }


def measure_bubble(rec, steps: int, *, group, device=None) -> dict | None:
    """Gather the spans of every rank of `group` (the pipeline: untimed, not counted) and
    return the bubble, on every rank."""
    mine = torch.tensor(rank_spans(rec.events, steps), dtype=torch.float64, device=device)
    if group is None or dist.get_world_size(group) == 1:
        every = [mine]
    else:
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        with rec.untimed():
            dist.all_gather(every, mine, group=group)
    return bubble_from_spans([[tuple(row) for row in t.cpu().tolist()] for t in every])


def predicted_from_costs(record: dict) -> dict:
    """The simulator's bubble for the record's schedule with the action costs the run itself
    measured (median duration of each kind) — what the schedule gives when stages cost what
    they really cost, rather than the closed form's ``F = 1, B = 2``. Point-to-point is free."""
    th = record.get("theory") or {}
    p, m, v = th["p"], th["m"], th.get("v", 1)
    steps = sorted({e["step"] for e in record["timeline"] if e.get("step") is not None})
    step = steps[1] if len(steps) > 1 else steps[0]
    cost = {}
    for kind in PIPELINE_KINDS:
        d = [e["end"] - e["start"] for e in record["timeline"]
             if e["kind"] == kind and e.get("step") == step]
        cost[kind] = v * statistics.median(d) if d else 0.0  # a chunk is 1/v of a stage
    split = cost["bwd_input"] > 0
    tl = simulate(build_schedule(th["schedule"], p, m, v), cost_f=cost["fwd"],
                  cost_b=cost["bwd_input"] + cost["bwd_weight"] if split else cost["bwd"],
                  cost_i=cost["bwd_input"] if split else None,
                  cost_w=cost["bwd_weight"] if split else None)
    return {"bubble_fraction": tl.bubble_fraction, "idle_s": tl.idle, "makespan_s": tl.makespan,
            "costs_s": cost}


def idle_split(record: dict) -> dict | None:
    """Why a pipeline idles: its bubble split into *schedule*, *imbalance* and *p2p*.

    Per step (the steps ``bubble_fraction`` averages), on the pipeline of rank 0, with ``p``
    ranks, span ``S`` and busy times ``b_r`` (idle ``I = p·S - Σ b_r``):

    - **imbalance** ``Σ_r (max b - b_r)``: the slowest stage paces the others; they idle for
      the work they do not have (uneven layers, the embedding, the head and the loss);
    - **schedule** ``p · max b · β / (1 - β) · u``: the fill and drain the schedule needs with
      free messages, ``β`` the simulator's bubble for this schedule with the run's own mean
      forward/backward costs — ``(p-1)/(m+p-1)`` for GPipe and 1F1B — and
      ``u = (Σ b - max b) / ((p-1) · max b)`` for uneven stages: a micro-batch fills and drains
      the line through every stage once, the faster ones quicker than the slowest (``u = 1``
      when they are equal). For GPipe and 1F1B this is ``p · (Σ b - max b) / m``, the idle time
      of "identical jobs through a line of stations" (`costmodel.gpt_step`);
    - **p2p** — the rest, ``I - imbalance - schedule``: messages' latency and the waits they
      cause (on a launch-bound GPU, also the host issuing each send and receive). Where the
      fill and drain went faster than a line of identical jobs (1F1B interleaves forwards with
      backwards of uneven stages), the schedule's estimate exceeds what the imbalance leaves:
      the schedule is then that remainder and p2p is 0 — never a negative share of time.

    Returned as fractions of ``p·S`` (they add up to the bubble fraction) and in seconds.
    None when the record is not a pipeline's."""
    th = record.get("theory") or {}
    if "schedule" not in th or "p" not in th or "m" not in th:
        return None
    p, m, v = th["p"], th["m"], th.get("v", 1)
    dims = record.get("dims") or {}
    stride = dims.get("dp", 1) * dims.get("tp", 1)
    ranks = [s * stride for s in range(p)]  # rank 0's pipeline on the (pp, dp, tp) mesh
    steps = sorted({e["step"] for e in record["timeline"] if e.get("step") is not None})
    keep = steps[1:] if len(steps) > 1 else steps
    rows = []
    for step in keep:
        evs = [e for e in record["timeline"] if e["rank"] in ranks and e["stream"] == "compute"
               and e["kind"] in PIPELINE_KINDS and e.get("step") == step]
        if not evs:
            continue
        span = max(e["end"] for e in evs) - min(e["start"] for e in evs)
        busy = [sum(e["end"] - e["start"] for e in evs if e["rank"] == r) for r in ranks]
        per_kind = {k: sum(e["end"] - e["start"] for e in evs if e["kind"] == k) / (p * m)
                    for k in PIPELINE_KINDS}
        split = per_kind["bwd_input"] > 0
        beta = simulate(build_schedule(th["schedule"], p, m, v), cost_f=per_kind["fwd"],
                        cost_b=(per_kind["bwd_input"] + per_kind["bwd_weight"]) if split
                        else per_kind["bwd"],
                        cost_i=per_kind["bwd_input"] if split else None,
                        cost_w=per_kind["bwd_weight"] if split else None).bubble_fraction
        idle = p * span - sum(busy)
        imbalance = sum(max(busy) - b for b in busy)
        # fill and drain: a micro-batch passes every stage once, the fast ones in less time than
        # the slowest — (Σ b - max b) / m instead of (p - 1)·max b / m (equal stages: the same)
        uneven = (sum(busy) - max(busy)) / ((p - 1) * max(busy)) if p > 1 and max(busy) > 0 else 1.0
        schedule = p * max(busy) * beta / (1 - beta) * uneven if beta < 1 else idle - imbalance
        schedule = min(schedule, idle - imbalance)  # a faster fill than the estimate: no time left for p2p
        rows.append({"span": span, "idle": idle, "schedule": schedule, "imbalance": imbalance,
                     "p2p": idle - imbalance - schedule, "busy": busy})
    if not rows:
        return None

    def mean(key):
        return sum(r[key] for r in rows) / len(rows)

    total = p * mean("span")
    seconds = {k: mean(k) for k in ("idle", "schedule", "imbalance", "p2p")}
    return {"bubble_fraction": seconds["idle"] / total,
            **{k: seconds[k] / total for k in ("schedule", "imbalance", "p2p")},
            "seconds": seconds, "span_s": mean("span"),
            "busy_s": [sum(r["busy"][i] for r in rows) / len(rows) for i in range(p)],
            "ranks": ranks}


def describe_idle_split(split: dict) -> str:
    """One line: the bubble and its three parts, largest first."""
    parts = sorted(("schedule", "imbalance", "p2p"), key=lambda k: -abs(split[k]))
    names = {"schedule": "schedule (fill and drain)", "imbalance": "stage imbalance",
             "p2p": "p2p and waits"}
    return (f"bubble {split['bubble_fraction']:.2f} = "
            + " + ".join(f"{split[k]:.2f} {names[k]}" for k in parts))
