"""Notebook 10's straggler studies, measured on CPU workers: one throttled rank, and two cures.

- **Re-balancing** (heterogeneous data parallelism, `training/hetero.py`): time each rank per
  row in an even run, give each a share of the batch in inverse proportion (`split_by_speed`),
  keep the gradient exact with the loss weights. Works when the slowness is *persistent*.
- **Dropping the slowest** (backup workers, Chen et al. 2016, `training/backup.py`): the
  slowest rank of the last step skips its forward and backward; the gradient is the mean over
  the rows of the ranks kept. Exact *for those rows*, but the effective batch shrinks.

Every function runs the library and returns rows of figures labelled measured (CPU workers,
`straggler` knob: the rank sleeps `(factor - 1)`× each op), emulated (virtual clock) or
predicted (the even, unthrottled run's per-row times scaled). The notebook prints and plots.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from mgpukit.experiment import run
from mgpukit.training import hetero


def per_rank_seconds(rec, kinds=("fwd", "bwd"), skip: int = 1) -> list[float]:
    """Each rank's median seconds per step in the compute regions `kinds`, over steps >= skip
    (the first warms up allocators and caches; the median shrugs off a step another process
    on a shared machine stretched)."""
    per = defaultdict(float)  # (rank, step) -> seconds
    for e in rec["timeline"]:
        if e["stream"] == "compute" and e["kind"] in kinds and (e["step"] or 0) >= skip:
            per[e["rank"], e["step"]] += e["end"] - e["start"]
    steps = range(skip, len(rec["step_time_s"]))
    return [statistics.median(per[r, s] for s in steps) for r in range(rec["world_size"])]


def step_seconds(rec, skip: int = 1) -> float:
    """The median step time (rank 0 times the synchronous step) after `skip` warm-up steps."""
    return statistics.median(rec["step_time_s"][skip:])


def measured_stragglers(*, factor: float = 4.0, rank: int = 1, model: str = "mlp-tiny",
                        global_batch: int = 4096, steps: int = 5, strategy: str = "dp-naive",
                        workers: int = 2) -> list[dict]:
    """Three measured runs of synchronous data parallelism on CPU workers:

    1. even split, no straggler: the per-row time of loading and of forward + backward, and the
       rest of the step (all-reduce, optimizer), which does not grow with rows;
    2. even split, rank `rank` throttled `factor`×: every rank waits for it;
    3. the split `split_by_speed` picks from run 2's measured seconds per row on each rank,
       same throttle — with gradient parity against the single-process reference.

    Predicted for a split `b` and per-rank factors `f`: `max_i b_i·(load + f_i·compute per row)
    + rest`, from run 1 (the optimizer, also slowed, is left out: it is tiny here).
    mlp-tiny (0.14 M parameters) at a large batch: compute grows with rows, the all-reduce
    does not, so re-balancing has something to recover."""
    common = dict(workers=workers, steps=steps, mode="cpu", model=model, global_batch=global_batch)
    even = (global_batch // workers,) * workers
    slow = {"straggler": {"rank": rank, "factor": factor}}
    factors = [factor if r == rank else 1.0 for r in range(workers)]

    base = run(strategy, parity=False, **common)
    load = sum(s / b for s, b in zip(per_rank_seconds(base, ("data",)), even)) / workers
    compute = sum(s / b for s, b in zip(per_rank_seconds(base), even)) / workers
    rest = step_seconds(base) - max(b * (load + compute) for b in even)

    def predict(split, fs):
        return max(b * (load + f * compute) for b, f in zip(split, fs)) + rest

    throttled = run(strategy, parity=False, options=slow, **common)
    per_row = [(c + d) / b for c, d, b in zip(per_rank_seconds(throttled), per_rank_seconds(throttled, ("data",)), even)]
    split = hetero.split_by_speed(global_batch, per_row, unit=global_batch // 64)
    balanced = run(strategy, parity=True, options={**slow, "batch_split": ",".join(map(str, split))}, **common)

    rows = []
    for label, split_, fs, rec in (("even, no straggler", even, [1.0] * workers, base),
                                   (f"even, rank {rank} ×{factor:g}", even, factors, throttled),
                                   (f"re-balanced, rank {rank} ×{factor:g}", split, factors, balanced)):
        rows.append({"layout": label, "rows": split_, "predicted_s": predict(split_, fs),
                     "measured_s": step_seconds(rec), "rank_compute_s": per_rank_seconds(rec),
                     "parity_ok": (rec.get("parity") or {}).get("ok")})
    rows[-1]["speedup_vs_even"] = rows[1]["measured_s"] / rows[2]["measured_s"]
    return rows
