"""The experiments of notebook 01, as functions that return result records (no plotting).

Each is a few `mgpukit.experiment.run` calls with settings chosen so a laptop answers in
seconds; the notebook plots what they return with `mgpukit.plots`.

- `compare_strategies`: dp-naive, dp-bucketed and ddp on the same run (parity, timelines);
- `scaling_records`: strong or weak scaling, measured on CPU workers or emulated on a profile;
- `lr_scaling_study`: loss curves when the global batch grows, with and without the linear
  learning-rate rule and warmup (Goyal et al. 2017).
"""
from __future__ import annotations

import warnings

from mgpukit.experiment import run, run_each
from mgpukit.measure.bounds import flag_scaling
from mgpukit.prepare import prepare
from mgpukit.runtime.launcher import OversubscribedWarning
from mgpukit.strategies import get
from mgpukit.studies.warm import warm_parent


def compare_strategies(strategies=("dp-naive", "dp-bucketed", "ddp"), *, workers: int = 2,
                       steps: int = 4, mode: str = "cpu", profile: str | None = None,
                       **overrides) -> dict[str, dict]:
    """One record per strategy, same config (parity is checked against `single`); each gets
    the `options` its own knobs accept (`bucket_mb` means nothing to dp-naive)."""
    warm_parent()
    options = overrides.pop("options", {}) or {}
    out = {}
    for name in strategies:
        knobs = {k.name for k in get(name).all_knobs()}
        out[name] = run(name, workers=workers, steps=steps, mode=mode, profile=profile,
                        options={k: v for k, v in options.items() if k in knobs}, **overrides)
    return out


def scaling_records(workers=(1, 2), *, scaling: str = "strong", strategy: str = "dp-bucketed",
                    model: str = "gpt-tiny", batch: int = 64, steps: int = 3, mode: str = "cpu",
                    profile: str | None = None, threads_per_worker: int | None = 1,
                    reuse: dict[int, dict] | None = None, **overrides) -> list[dict]:
    """Records for a speedup plot: `single` on one worker, `strategy` on each larger count.

    strong: the global batch stays `batch`, split over the workers (same problem, faster?).
    weak: each worker keeps `batch`, so the global batch is `batch × workers` (bigger problem,
    same time?). Measured runs pin one intra-op thread per worker (`threads_per_worker=1`) so
    one worker cannot already use every core — otherwise 1 vs 2 compares 2 cores with 2 cores.
    A speedup above the worker count (strong) or an efficiency above 1 (weak) is flagged in its
    record (`record["flags"]`; `mgpukit.measure.bounds.show_flags(records)` prints them).

    `reuse={n: record}`: a run of this very configuration made already (strong scaling's n-worker
    run at batch B *is* weak scaling's at B/n per worker) is taken, not run again; a record of
    another configuration is refused.
    """
    if scaling not in ("strong", "weak"):
        raise ValueError(f"scaling={scaling!r}: use 'strong' or 'weak'.")
    warm_parent()
    records = []
    for n in workers:
        gb = batch if scaling == "strong" else batch * n
        if n in (reuse or {}):
            rec = reuse[n]
            want = {"strategy": "single" if n == 1 else strategy, "world_size": n, "mode": mode,
                    "model": model, "global_batch": gb, "steps": steps}
            if mode == "emulated":
                want["profile"] = getattr(profile, "name", profile)
            got = {k: rec["config"].get(k) if k in ("model", "global_batch", "steps") else rec.get(k) for k in want}
            if got != want:
                raise ValueError(f"reuse[{n}] is another run ({got}); this series needs {want}.")
            records.append({**rec, "flags": []})
            continue
        with warnings.catch_warnings():  # emulated runs may use more workers than cores
            warnings.simplefilter("ignore", OversubscribedWarning)
            records.append(run("single" if n == 1 else strategy, workers=n, mode=mode, profile=profile,
                               model=model, global_batch=gb, steps=steps, parity=False,
                               threads_per_worker=threads_per_worker if mode != "emulated" else None,
                               **overrides))
    flag_scaling(records, scaling)
    return records


def lr_scaling_study(*, workers: int = 4, per_worker_batch: int = 8, lr: float = 0.05,
                     steps: int = 40, warmup_steps: int = 10, model: str = "mlp-tiny",
                     base_workers: int = 1, strategy: str = "dp-bucketed") -> list[dict]:
    """Loss curves for the linear scaling rule (Goyal et al. 2017).

    Four runs at a fixed batch per worker: `base_workers` worker(s) at `lr` (the baseline the
    rate was tuned for), then `workers` workers at the same `lr`, at `lr × k` (k = the batch
    growth), and at `lr × k` reached by `warmup_steps` of linear warmup. Each record's
    `strategy` is replaced by a legend label such as "lr 0.2 (linear rule)" (plots append
    "×workers"); the strategy's own name stays in `record["run"]`.
    `workers` may exceed the cores: only the losses matter here, not the timings. The three
    `workers`-worker runs share one launch (`experiment.run_each`): the same losses as three.
    """
    warm_parent()
    base = per_worker_batch * base_workers
    k = workers // base_workers
    scaled = [
        ({}, f"lr {lr:g} (not scaled)"),
        ({"lr_scaling": "linear"}, f"lr {lr * k:g} (linear rule)"),
        ({"lr_scaling": "linear", "warmup_steps": warmup_steps},
         f"lr {lr * k:g} (linear rule, {warmup_steps} warmup steps)"),
    ]
    kw = dict(mode="cpu", model=model, steps=steps, lr=lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        first = run(strategy, workers=base_workers, global_batch=base, parity=False,
                    options={"base_batch": base}, **kw)
        # the three runs at `workers` share one launch (a launch costs seconds on a small machine)
        rest = run_each([prepare(strategy, workers=workers, global_batch=per_worker_batch * workers,
                                 options={**opts, "base_batch": base}, **kw) for opts, _ in scaled])
    labels = [f"lr {lr:g}"] + [label for _, label in scaled]
    return [{**rec, "strategy": label, "run": rec["strategy"]} for rec, label in zip([first, *rest], labels)]
