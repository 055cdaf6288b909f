"""Notebook 10's straggler studies, measured on CPU workers: one throttled rank, and two cures.

- **Re-balancing** (heterogeneous data parallelism, `training/hetero.py`): time each rank per
  row in an even run, give each a share of the batch in inverse proportion (`split_by_speed`),
  keep the gradient exact with the loss weights. Works when the slowness is *persistent*.
- **Dropping the slowest** (backup workers, Chen et al. 2016, `training/backup.py`): the
  rank whose latest measured compute was the slowest skips its forward and backward (after a
  warm-up and a first measured step, with a full step every few steps to re-time every rank);
  the gradient is the mean over the rows of the ranks kept. Exact *for those rows*, but the
  effective batch shrinks.

Every function runs the library and returns rows of figures labelled measured (CPU workers,
`straggler` knob: the rank sleeps `(factor - 1)`× each op), emulated (virtual clock) or
predicted (the even, unthrottled run's per-row times scaled). The notebook prints and plots.
"""
from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

import torch

from mgpukit.config import RunConfig
from mgpukit.experiment import load_weights, run
from mgpukit.training import hetero
from mgpukit.training.backup import RETIME_EVERY, WARMUP_STEPS, runs_in_full  # noqa: F401  (notebook 10)
from mgpukit.training.building import Batches, build_model, loss_fn
from mgpukit.lessons.tables import markdown_table


def per_rank_seconds(rec, kinds=("fwd", "bwd"), skip: int = 1) -> list[float | None]:
    """Each rank's seconds per step in the compute regions `kinds`: the least over the steps >=
    skip (the first warms up allocators and caches) in which the rank ran them. The least, as
    `timeit` reports: on a shared machine every other step is the same work plus someone else's.
    A step the rank skipped (dropped by `drop_slowest`) is not a 0 s step: it is left out, and a
    rank that ran none of them gets None."""
    per = defaultdict(float)  # (rank, step) -> seconds, only steps with such a region
    for e in rec["timeline"]:
        if e["stream"] == "compute" and e["kind"] in kinds and (e["step"] or 0) >= skip:
            per[e["rank"], e["step"]] += e["end"] - e["start"]
    steps = range(skip, len(rec["step_time_s"]))
    ran = [[per[r, s] for s in steps if (r, s) in per] for r in range(rec["world_size"])]
    return [min(t) if t else None for t in ran]


def dropped_per_step(rec) -> list[list[int]] | None:
    """The ranks `drop_slowest` dropped at each step (`training/backup.py` records them), or None
    for a run without the knob."""
    return (rec.get("extra") or {}).get("0", {}).get("dropped")


def step_seconds(rec, skip: int = 1) -> float:
    """The fastest step (rank 0 times the synchronous step) after `skip` warm-up steps."""
    return min(rec["step_time_s"][skip:])


def measured_stragglers(*, factor: float = 4.0, rank: int = 1, model: str = "mlp-tiny",
                        global_batch: int = 4096, steps: int = 6, strategy: str = "dp-naive",
                        workers: int = 2, drop: bool = True, split_from: str = "measured") -> list[dict]:
    """Three or four measured runs of synchronous data parallelism on CPU workers:

    1. even split, no straggler: the per-row time of loading and of forward + backward, and the
       rest of the step (all-reduce, optimizer), which does not grow with rows;
    2. even split, rank `rank` throttled `factor`×: every rank waits for it;
    3. the split `split_by_speed` picks from run 2's measured seconds per row on each rank
       (`split_from="measured"`, what one would do on a real cluster) or from run 1's times
       scaled by the known factor (`"factor"`: immune to a noisy neighbour during run 2), same
       throttle — with gradient parity against the single-process reference;
    4. (`drop`) even split, same throttle, `drop_slowest=1`: on every step that does not run in
       full (`training/backup.runs_in_full`) the rank measured slowest — the throttled one, unless
       noise says otherwise — skips its compute (needs `strategy="dp-naive"`).

    Predicted for a split `b` and per-rank factors `f`: `max_i b_i·(load + f_i·compute per row)
    + rest`, from run 1 (the optimizer, also slowed, is left out: it is tiny here); dropping the
    throttled rank is predicted as the unthrottled step (the kept rank's compute, the same rest).
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
    if split_from == "measured":
        per_row = [(c + d) / b for c, d, b in zip(per_rank_seconds(throttled),
                                                  per_rank_seconds(throttled, ("data",)), even)]
    elif split_from == "factor":
        per_row = [load + f * compute for f in factors]
    else:
        raise ValueError(f"split_from={split_from!r}: use 'measured' or 'factor'.")
    unit = global_batch // 64 if global_batch % 64 == 0 else 1  # round splits: 64ths of the batch
    split = hetero.split_by_speed(global_batch, per_row, unit=unit)
    balanced = run(strategy, parity=True, options={**slow, "batch_split": ",".join(map(str, split))}, **common)

    runs = [("even, no straggler", even, [1.0] * workers, base),
            (f"even, rank {rank} ×{factor:g}", even, factors, throttled),
            (f"re-balanced, rank {rank} ×{factor:g}", split, factors, balanced)]
    if drop:
        dropped = run(strategy, parity=False, options={**slow, "drop_slowest": 1}, **common)
        runs.append((f"drop slowest, rank {rank} ×{factor:g}", even, [1.0] * workers, dropped))
    rows = []
    for label, split_, fs, rec in runs:
        rows.append({"layout": label, "rows": split_, "predicted_s": predict(split_, fs),
                     "measured_s": step_seconds(rec), "rank_compute_s": per_rank_seconds(rec),
                     "parity_ok": (rec.get("parity") or {}).get("ok"), "kind": "measured (CPU workers)",
                     "dropped": dropped_per_step(rec)})
    for r in rows[2:]:
        r["speedup_vs_even"] = rows[1]["measured_s"] / r["measured_s"]
    rows[2]["split_from"], rows[2]["seconds_per_row"] = split_from, per_row
    return rows


def held_out_loss(weights_path, cfg, *, rows: int = 64) -> float:
    """The loss of the weights in `weights_path` on one batch no run trains on (`rows` rows of
    a step far past the run's): runs that trained on different rows compared on the same ones."""
    held = cfg.replace(global_batch=rows)
    model = build_model(held)
    model.load_state_dict(load_weights(weights_path))
    x, y = Batches(held)(10_000 + cfg.steps)
    with torch.no_grad():
        return float(loss_fn(held)(model(x), y))


def drop_slowest_emulated(*, factor: float = 3.0, rank: int = 1, steps: int = 7, global_batch: int = 8,
                          profile: str = "h100-nvlink", workers: int = 2, baseline_steps: int = 2) -> dict:
    """Emulated (deterministic) dp-naive on `profile`: the step time without a straggler, with
    rank `rank` `factor`× slower, and with `drop_slowest=1`; and what dropping costs — the
    straggler's run trains on the full batch every step, the dropped one on the kept ranks' rows
    whenever it drops (`training/backup.py`: not at warm-up, the first measured step or a re-time
    step): each run's loss on its own batches, and both final weights' loss on the same held-out
    batch (`held_out_loss`).

    Step times are over steps ≥ 1 (step 0 differs on the virtual clock: it creates the gradients
    and the optimizer's state): ``emulated_s`` the run's mean step — for the dropping run, its
    full steps included, which wait for the straggler — and ``dropped_step_s`` the mean of the
    steps it dropped a rank. The run without a straggler computes the same numbers as the
    straggler's run (the virtual clock slows rank `rank`, not its arithmetic), so only its step
    time is read, after `baseline_steps` steps (≥ 2); its row's ``losses`` and ``held_out_loss``
    are None."""
    if baseline_steps < 2 or steps < 2:
        raise ValueError(f"steps={steps}, baseline_steps={baseline_steps}: use at least 2 (step 0 creates the "
                         "gradients and optimizer state; later steps are the ones to time)")
    common = dict(workers=workers, mode="emulated", profile=profile, parity=False, global_batch=global_batch)
    slow = {"straggler": {"rank": rank, "factor": factor}}
    cfg = RunConfig(global_batch=global_batch, steps=steps)
    r = run("dp-naive", steps=baseline_steps, **common)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    rows = [{"run": "no straggler", "emulated_s": mean(r["step_time_s"][1:]), "losses": None, "held_out_loss": None,
             "dropped": None, "steps": baseline_steps}]
    runs = {f"rank {rank} ×{factor:g}": slow, f"rank {rank} ×{factor:g}, drop slowest": {**slow, "drop_slowest": 1}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, options) in enumerate(runs.items()):
            path = Path(tmp) / f"{i}.safetensors"
            r = run("dp-naive", steps=steps, options=options, weights_path=path, **common)
            dropped = dropped_per_step(r)
            rows.append({"run": label, "emulated_s": mean(r["step_time_s"][1:]), "losses": r["losses"],
                         "held_out_loss": held_out_loss(path, cfg), "dropped": dropped, "steps": steps,
                         "step_time_s": r["step_time_s"]})
    full, drop = rows[1], rows[2]
    dropping = [s for s in range(1, steps) if drop["dropped"][s]]
    drop["dropped_step_s"] = mean([drop["step_time_s"][s] for s in dropping])
    per_rank = global_batch / workers
    kept = [global_batch - per_rank * len(drop["dropped"][s]) for s in range(1, steps)]
    return {"rows": rows, "steps": steps, "global_batch": global_batch, "dropping_steps": dropping,
            "full_steps": [s for s in range(1, steps) if not drop["dropped"][s]],
            "speedup": full["emulated_s"] / drop["emulated_s"],
            "speedup_dropped_steps": full["emulated_s"] / drop["dropped_step_s"],
            "vs_no_straggler": drop["dropped_step_s"] / rows[0]["emulated_s"],
            "held_out_gap": drop["held_out_loss"] / full["held_out_loss"] - 1,
            "rows_per_step": mean(kept), "rows_per_dropped_step": global_batch - per_rank,
            "rows_per_s_gain": (sum(kept) / sum(drop["step_time_s"][1:])) / (global_batch / full["emulated_s"])}


def drop_markdown(emu: dict) -> str:
    """:func:`drop_slowest_emulated`'s runs as a table: step time, last loss, held-out loss."""
    body = [[r["run"], f"{r['emulated_s'] * 1e3:.2f}", f"{r['losses'][-1]:.4f}" if r["losses"] else "same numbers",
             f"{r['held_out_loss']:.4f}" if r["held_out_loss"] is not None else "as the straggler's run"]
            for r in emu["rows"]]
    return markdown_table(["run (emulated)", "ms / step", "last loss, own rows", "held-out loss"], body)
