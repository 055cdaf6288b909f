"""Activation checkpointing's trade, measured: activation bytes saved against step time spent
recomputing (notebook 07, `mgpukit bench checkpointing`)."""
from __future__ import annotations

import statistics

from mgpukit.experiment import run


def _one_worker(layout: dict, *, steps: int, global_batch: int, model: str, **kw) -> dict:
    return run("single", workers=1, mode="cpu", steps=steps, global_batch=global_batch, model=model,
               layout=layout, parity=False, threads_per_worker=1, **kw)


def measure_checkpointing(*, policies=("none", "selective", "full"), steps: int = 6,
                          global_batch: int = 8, model: str = "gpt-tiny", repeats: int = 1) -> list[dict]:
    """Per policy: measured peak activation bytes (forward and recomputation), median step time,
    and both relative to "none". One worker, one thread (the recompute is the only difference).
    `repeats` > 1 interleaves the policies and keeps each one's median step time."""
    times: dict[str, list[float]] = {p: [] for p in policies}
    recs: dict[str, dict] = {}
    for _ in range(repeats):
        for p in policies:
            r = _one_worker({"checkpointing": p}, steps=steps, global_batch=global_batch, model=model)
            times[p].extend(r["step_time_s"][1:] or r["step_time_s"])  # step 0 warms up
            recs[p] = r
    base = recs[policies[0]]
    base_act, base_t = base["memory"]["0"]["activations"], statistics.median(times[policies[0]])
    rows = []
    for p in policies:
        act, t = recs[p]["memory"]["0"]["activations"], statistics.median(times[p])
        rows.append({"checkpointing": p, "activations_bytes": act, "step_time_s": t,
                     "activations_vs_none": act / base_act, "time_vs_none": t / base_t,
                     "losses": recs[p]["losses"], "step_time": recs[p].get("step_time")})
    return rows


