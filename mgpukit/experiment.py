"""The one runner: validate -> launch -> record -> parity, for every way a run is started.

`mgpukit run`, `mgpukit.run`, the notebooks, the tour, the benchmarks and the exported scripts
(`mgpukit.launched`, under `torchrun` / `accelerate launch`) all go through `prepare` (every
check, before anything starts), `run_rank` (what each worker does) and `finish` (the record,
its parity, the files):

    rec = mgpukit.run("ddp", workers=2, steps=20)
    rec = mgpukit.run("pp-1f1b", workers=4, layout={"dp": 2, "pp": 2})      # dp × pp
    rec["parity"]["ok"], rec["tokens_per_s"], rec["layout"]

Parity: the strategy's logged losses and gradient norms (per step) and its final weights are
compared with the `single` reference trained on the same global batches, at torch's default
fp32 tolerances (`torch.testing.assert_close`: rtol 1.3e-6, atol 1e-5) unless the strategy
states its own (pipelines: PyTorch's pipelining tolerances; lossy compression: a loss-curve
check) or the layout trains in bf16 / fp16 (every step's loss within 5% of the fp32 reference's). The gradient norm is what catches a missing average: Adam's update barely changes if
every gradient is doubled, but the norm does. A run *is* the reference (`single`, no parity) or
*has no* reference (`ps-async`): the record says which.

Shape mode (`shape=True`, emulated only; `mgpukit.measure.shape`): every rank runs the same
code under torch's `FakeTensorMode` — real-scale models (`gpt2-350m`, `llama-7b`, …) with no
data, collectives that keep their time but move nothing — so the record's times and memory are
those of the real program on the profiled hardware; its losses are null and its parity
"n/a (shape mode)":

    rec = mgpukit.run("pp-1f1b", workers=8, mode="emulated", profile="h100-nvlink",
                      shape=True, model="gpt2-350m", steps=1)
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
import time
from pathlib import Path

import torch

from mgpukit import strategies
from mgpukit.config import SHAPE_MODELS, RunConfig
from mgpukit.files import OutputError, check_output, export_profiler_trace, write_all, write_bytes
from mgpukit.fits import check_fits
from mgpukit.measure.progress import follow
from mgpukit.measure.record import build_record, save_chrome_trace, save_record
from mgpukit.measure.recorder import Recorder
from mgpukit.measure.shape import maybe as maybe_fake
from mgpukit.parallelize import parallelize, resolve_layout
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.hardware import env_info, placement
from mgpukit.runtime.launcher import WorkerError, launch, resolve_mode
from mgpukit.strategies.policies.precision import loss_curve_parity
from mgpukit.strategies.registry import Strategy
from mgpukit.threads import policy as thread_policy
from mgpukit.training.building import build_model, build_optimizer
from mgpukit.training import backup, hetero
from mgpukit.training.checkpoint import checkpointing, has_checkpoint
from mgpukit.training.trainer import train

FP32_TOL = {"rtol": 1.3e-6, "atol": 1e-5}  # torch.testing.assert_close defaults for float32
_REFERENCE_CACHE: dict[str, dict] = {}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prepared:
    """A run that passed every check: what `launch` needs and what the record says."""

    strategy: Strategy
    cfg: RunConfig  # with its resolved layout
    workers: int
    dims: ParallelDims
    mode: str
    profile: str | None
    shape: bool = False  # shape mode: fake tensors at real scale (module docstring)


def prepare(strategy: str, *, workers: int | None = None, mode: str = "auto", profile=None,
            config: RunConfig | None = None, layout: dict | None = None, shape: bool = False,
            **overrides) -> Prepared:
    """Every check a run needs, before anything starts; raises ValueError saying what to change."""
    strat = strategies.get(strategy)
    cfg = (config or RunConfig()).replace(**overrides) if overrides else (config or RunConfig())
    check_shape(shape, mode, cfg.model, strat, cfg.options)
    cfg = cfg.replace(options=strat.check_options(cfg.options))
    if cfg.model not in strat.models:
        raise ValueError(f"strategy {strategy!r} runs on models {strat.models}, not {cfg.model!r}.")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers={workers!r}: use a positive number of workers.")
    if cfg.layout is not None:  # a full layout given: its fields are the overrides
        layout = {**{k: getattr(cfg.layout, k) for k in ("dp", "tp", "pp", "schedule", "v",
                                                         "checkpointing", "dtype", "stage_layers")},
                  **(layout or {})}
    resolved = resolve_layout(strat, cfg, workers, layout)
    workers = resolved.world_size
    if workers < strat.min_workers:
        raise ValueError(f"strategy {strategy!r} needs at least {strat.min_workers} workers, got {workers}.")
    dims = ParallelDims(dp=resolved.dp, tp=resolved.tp, pp=resolved.pp, world_size=workers)
    cfg = cfg.replace(layout=resolved)
    if resolved.pp == 1 and not cfg.options.get("batch_split"):
        check_batch(cfg, strat.batch_ranks(workers) if strat.batch_ranks else dims.dp)
    if strat.validate:
        strat.validate(cfg, dims)
    if mode == "emulated" and not strat.emulation:
        raise ValueError(f"strategy {strategy!r} has no emulated mode; use mode='cpu'.")
    mode = resolve_mode(mode, workers)
    hetero.check(cfg, dims, mode)  # unequal batches / per-rank profiles (training/hetero.py)
    backup.check(cfg, dims, strat.name)  # dropping the slowest ranks (training/backup.py)
    if mode == "emulated" and not profile:
        raise ValueError("mode='emulated' needs a hardware profile, e.g. profile='h100-nvlink'.")
    if mode == "emulated" and isinstance(profile, str):
        from mgpukit.costmodel.hardware import load_profile

        load_profile(profile)  # an unknown profile fails here, naming the known ones
    return Prepared(strategy=strat, cfg=cfg, workers=workers, dims=dims, mode=mode,
                    profile=profile if mode == "emulated" else None, shape=bool(shape))


def check_shape(shape, mode: str, model: str, strat: Strategy, options: dict) -> None:
    """Shape mode is emulated only (fake tensors have no values to measure). The real-scale
    models run in shape mode or for real, after the memory check (`mgpukit.fits`)."""
    if not isinstance(shape, bool):
        raise ValueError(f"shape={shape!r}: give True or False.")
    if shape and mode != "emulated":
        raise ValueError("shape mode runs on the virtual clock only: add --emulate PROFILE "
                         "(mode='emulated', profile='h100-nvlink').")
    if shape and strat.worker is not None:
        raise ValueError(f"{strat.name} runs its own worker loop; shape mode runs the appliers "
                         f"and the one trainer only.")
    if shape and options.get("checkpoint_dir"):
        raise ValueError("shape mode has no weights to checkpoint (fake tensors); drop checkpoint_dir.")


def run(strategy: str, *, workers: int | None = None, mode: str = "auto", profile: str | None = None,
        config: RunConfig | None = None, layout: dict | None = None, parity: bool = True,
        tolerance: dict | None = None, timeout_s: float = 600.0, json_path: str | Path | None = None,
        trace_path: str | Path | None = None, torch_profile_dir: str | Path | None = None,
        echo: bool = False, threads_per_worker: int | None = None,
        weights_path: str | Path | None = None, collective_timeout_s: float | None = None,
        debug_collectives: bool = False, max_restarts: int = 0, shape: bool = False,
        **overrides) -> dict:
    """Run `strategy` on `workers` ranks and return its result record.

    mode: "auto" | "cpu" | "gpu" | "emulated" (with `profile`, e.g. "h100-nvlink").
    config: a RunConfig; keyword `overrides` (steps=..., global_batch=..., options=...) replace
    its fields. layout: overrides of the strategy's parallel layout, e.g. {"dp": 2, "pp": 2}.
    `threads_per_worker` pins intra-op threads (default: cores // workers).
    `weights_path` saves the trained (unsharded) weights as safetensors; `json_path` writes the
    record, `trace_path` a Chrome/Perfetto trace of its timeline, `torch_profile_dir` a
    torch.profiler trace per rank (the kernel-level view).
    `timeout_s` bounds the whole launch; `collective_timeout_s` one collective's wait (default
    `default_collective_timeout`: seconds for the tiny models), so ranks that called different
    collectives fail with the operation named instead of hanging. `debug_collectives=True` has
    torch compare every collective's fingerprint across ranks (TORCH_DISTRIBUTED_DEBUG=DETAIL).
    `shape=True` (emulated only): the real program under fake tensors (module docstring).
    """
    p = prepare(strategy, workers=workers, mode=mode, profile=profile, config=config, layout=layout,
                shape=shape, **overrides)
    check_outputs(json_path=json_path, trace_path=trace_path, weights_path=weights_path,
                  torch_profile_dir=torch_profile_dir)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s={timeout_s!r}: give a positive number of seconds.")
    if collective_timeout_s is None:
        collective_timeout_s = default_collective_timeout(p.cfg, p.mode, shape=p.shape)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts={max_restarts!r}: give a whole number >= 0.")
    if max_restarts and not p.cfg.options.get("checkpoint_dir"):
        raise ValueError("max_restarts needs checkpoint_dir=... (options) to restart from.")
    if p.cfg.options.get("resume") and not p.cfg.options.get("checkpoint_dir"):
        raise ValueError("resume=true needs checkpoint_dir=... (--checkpoint-dir) to resume from.")
    if p.cfg.options.get("checkpoint_every") and not p.cfg.options.get("checkpoint_dir"):
        raise ValueError(f"checkpoint_every={p.cfg.options['checkpoint_every']} needs checkpoint_dir=... "
                         f"(--checkpoint-dir): where to save them.")
    if p.cfg.options.get("checkpoint_dir"):
        check_output(p.cfg.options["checkpoint_dir"], what="checkpoint folder (checkpoint_dir)",
                     directory=True)
    memory_check = {} if p.shape else check_fits(
        p.cfg, p.cfg.layout, workers=p.workers, mode=p.mode, strategy=p.strategy.name,
        parity=parity and p.strategy.reference is not None)
    restarts = []
    while True:
        try:
            with progress_bar(p) as progress_file:
                results = launch(run_rank, p.workers, p.strategy.name, p.cfg, mode=p.mode, profile=p.profile,
                                 dims=p.dims, timeout_s=timeout_s, echo=echo,
                                 threads_per_worker=threads_per_worker,
                                 collective_timeout_s=min(collective_timeout_s, timeout_s),
                                 debug_collectives=debug_collectives,
                                 options={"torch_profile_dir": str(torch_profile_dir) if torch_profile_dir else None,
                                          "shape": p.shape, "progress_file": progress_file})
            break
        except WorkerError as e:  # a rank died: go on from the last checkpoint, if there is one
            if len(restarts) >= max_restarts or not has_checkpoint(p.cfg.options["checkpoint_dir"]):
                raise
            restarts.append({"error": str(e).splitlines()[0], "rank": e.rank})
            p = dataclasses.replace(p, cfg=p.cfg.replace(options={**p.cfg.options, "resume": True}))
    record = finish(p, [r["result"] for r in results], results[0].get("weights"), parity=parity,
                    tolerance=tolerance, timeout_s=timeout_s)
    record["restarts"] = restarts
    record["memory_check"] = memory_check
    write_outputs(record, results[0].get("weights"), json_path=json_path, trace_path=trace_path,
                  weights_path=weights_path, failed=[r["output_error"] for r in results
                                                     if r.get("output_error")])
    return record


def write_outputs(record: dict, weights, *, json_path=None, trace_path=None, weights_path=None,
                  failed=()) -> None:
    """The run's files, the record first; each is tried even when another failed, and every
    failure (`failed`: the workers' own, e.g. a torch.profiler trace) ends in one `OutputError`
    that names what was written — it carries the record (`.record`), nothing is lost."""
    outputs = [("record (--json)", json_path, lambda path: save_record(record, path)),
               ("weights (--save-weights)", weights_path, lambda path: save_weights(weights, path)),
               ("trace (--trace)", trace_path, lambda path: save_chrome_trace(record, path))]
    try:
        write_all([o for o in outputs if o[1]], failed=failed)
    except OutputError as e:
        e.record = record
        raise


def progress_bar(p: Prepared):
    """A tqdm bar in this process for a real-scale model trained on CPU workers (minutes per
    step: `measure/progress.py`); the path the workers write to, or None for everything else."""
    if p.shape or p.cfg.model not in SHAPE_MODELS or p.mode == "gpu":
        return contextlib.nullcontext(None)
    path = os.path.join(tempfile.gettempdir(), f"mgpukit-progress-{os.getpid()}-{time.monotonic_ns()}")
    return follow(path, steps=p.cfg.steps, desc=f"{p.cfg.model} · {p.strategy.name} ({p.mode})")


def default_collective_timeout(cfg: RunConfig, mode: str, *, shape: bool = False) -> float:
    """Seconds one collective may wait for its peers, proportionate to the job.

    On the shipped models a step takes milliseconds to a second, so a collective that waits a
    minute is a rank that will never come (a mismatch), not a slow one: 60 s for the tiny
    models, 180 s for gpt-small, an hour for a real-scale model trained for real (CPU workers
    take minutes per step), plus the seconds a deliberate input delay adds per step
    (`loader_delay_s` × micro-batches); at least 300 s on GPUs, where NCCL's first collective
    sets up its communicators."""
    seconds = 180.0 if cfg.model == "gpt-small" else 60.0
    if shape:  # fake tensors: a rank of a real-scale model spends seconds per step on the host
        seconds = 600.0
    elif cfg.model in SHAPE_MODELS:  # real tensors at real scale: minutes per step on CPU workers
        seconds = 3600.0
    delay = cfg.options.get("loader_delay_s") or 0.0
    seconds += 4 * float(delay) * cfg.micro_batches
    return max(seconds, 300.0) if mode == "gpu" else seconds


def check_outputs(*, json_path=None, trace_path=None, weights_path=None, torch_profile_dir=None) -> None:
    """Every file a run will write can be written — checked before it trains, so a typo in a
    path does not throw a finished run away (ValueError naming the path and the fix)."""
    for path, what in ((json_path, "record (--json)"), (trace_path, "trace (--trace)"),
                       (weights_path, "weights (--save-weights)")):
        if path:
            check_output(path, what=what)
    if torch_profile_dir:
        check_output(torch_profile_dir, what="torch.profiler folder (--profile-torch)", directory=True)


def run_rank(name: str, cfg: RunConfig):
    """What every rank runs: the strategy with a recorder (optional torch.profiler trace).

    An unmodified model -> the layout's appliers (`parallelize`) -> the one trainer; a strategy
    with a topology of its own (the parameter server) runs its `worker` instead."""
    from mgpukit.runtime.context import current

    ctx = current()
    if ctx.options.get("shape") and ctx.device.type == "cpu":
        # fake tensors tell "cpu" (where the model is built) from "cpu:0" (Accelerate's name)
        ctx = dataclasses.replace(ctx, device=torch.device("cpu"))
    torch.manual_seed(cfg.seed)
    rec = Recorder(ctx)
    strat = strategies.get(name)
    prof_dir = ctx.options.get("torch_profile_dir")
    if prof_dir:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            weights = _train(strat, ctx, rec, cfg)
        try:  # a failed trace must not cost the run: the parent reports it after the record
            export_profiler_trace(prof, Path(prof_dir) / f"{name}-rank{ctx.rank}.json",
                                  what=f"rank {ctx.rank}'s torch.profiler trace (--profile-torch)")
        except OSError as e:
            return {"result": rec.result(), "weights": weights, "output_error": str(e)}
    else:
        with maybe_fake(rec.shape):  # shape mode: everything below is fake tensors
            weights = _train(strat, ctx, rec, cfg)
    return {"result": rec.result(), "weights": weights}


def _train(strat: Strategy, ctx, rec, cfg) -> dict | None:
    if ctx.options.get("device_guard"):  # factory calls without device= become meta tensors
        from mgpukit.measure.device_guard import DeviceGuard

        with DeviceGuard():
            return _train_unguarded(strat, ctx, rec, cfg)
    return _train_unguarded(strat, ctx, rec, cfg)


def _train_unguarded(strat: Strategy, ctx, rec, cfg) -> dict | None:
    if strat.worker is not None:
        return (strat.worker(ctx, rec, cfg) or {}).get("weights")
    parts = parallelize(build_model(cfg), cfg, ctx, rec, strat)
    optimizer = build_optimizer(cfg, parts.params)
    return train(ctx, rec, cfg, parts, optimizer,
                 checkpoint=checkpointing(ctx, rec, cfg, parts, optimizer))


def finish(p: Prepared, ranks: list[dict], weights: dict | None, *, parity: bool = True,
           tolerance: dict | None = None, timeout_s: float = 600.0, json_path=None, trace_path=None,
           weights_path=None, in_process=None) -> dict:
    """The record from every rank's result, its parity, and the files asked for.

    `in_process`: a worker context to train the reference in this very process (a script under
    `torchrun`, rank 0, after its group is gone) instead of launching it."""
    strat, cfg = p.strategy, p.cfg
    record = build_record(
        strategy=strat.name, mode=p.mode, profile=_profile_name(p.profile), dims=p.dims.as_dict(),
        config=cfg.as_dict(), ranks=ranks, tokens_per_step=cfg.tokens_per_step(), env=env_info(),
        theory=strat.theory(cfg, p.dims) if strat.theory else None,
    )
    record["layout"] = dataclasses.asdict(cfg.layout)
    record["shape"] = p.shape
    record["threads"].update(thread_policy())
    if p.mode in ("cpu", "gpu"):  # where auto puts this many ranks on this machine, and why
        record["placement"] = placement(p.workers)[1]
    if p.shape:  # fake tensors: no values to compare
        record["parity"] = "n/a (shape mode)"
        record["reference"] = None
    elif strat.reference is None:
        record["parity"] = None
        record["reference"] = "is the reference" if strat.name == "single" else "no reference"
        if strat.name == "single" and is_reference_layout(cfg.layout):
            _REFERENCE_CACHE.setdefault(_ref_key(cfg, p.mode, record["threads"]["per_worker"]),
                                        {"record": record, "weights": weights})
    elif cfg.options.get("drop_slowest"):  # from step 1 on, the gradient of fewer rows than the reference's
        record["parity"] = None
        record["reference"] = ("no reference: drop_slowest trains on the kept ranks' rows "
                               "(tests/test_stragglers.py checks that gradient)")
    elif parity:
        ref = reference(strat.reference, cfg, mode=p.mode, timeout_s=timeout_s, in_process=in_process,
                        threads=record["threads"]["per_worker"])
        check, tol = strat.compare or compare, tolerance or strat.tolerance
        if cfg.layout.dtype != "fp32":  # reduced precision changes the numbers on purpose
            check, tol = loss_curve_parity(), tolerance
        record["parity"] = check(record, weights, ref, tol)
        record["reference"] = strat.reference
    write_outputs(record, weights, json_path=json_path, trace_path=trace_path, weights_path=weights_path)
    return record


def _profile_name(profile):
    return getattr(profile, "name", profile)


def save_weights(weights: dict | None, path: str | Path) -> Path:
    """The trained, unsharded weights as safetensors (no pickle: safe to load anywhere)."""
    from safetensors.torch import save

    if weights is None:
        raise ValueError("this strategy returned no weights to save.")
    # serialised in memory, written by `write_bytes`: a failed write is an OSError with its
    # cause (safetensors' own writer reports a full disk as an opaque error) and the older file
    # is left whole
    return write_bytes(path, save({k: v.contiguous() for k, v in weights.items()}),
                       what="weights (--save-weights)")


def load_weights(path: str | Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def check_batch(cfg: RunConfig, ranks: int) -> None:
    """Every rank that takes a slice of the batch gets the same number of whole micro-batches."""
    per = ranks * cfg.micro_batches
    if cfg.global_batch % per:
        good = per * max(1, round(cfg.global_batch / per))
        raise ValueError(
            f"global_batch={cfg.global_batch} does not split into {ranks} data ranks × "
            f"micro_batches={cfg.micro_batches}; use a global batch that is a multiple of {per} "
            f"(e.g. {good}), or change the number of workers or micro-batches.")


def is_reference_layout(layout) -> bool:
    """The reference trains at torch's fp32 defaults with every activation kept; a `single` run
    with a policy (checkpointing, bf16) is a run like any other, never the cached reference."""
    return layout is None or (layout.dtype == "fp32" and layout.checkpointing == "none")


def _reference_config(cfg: RunConfig) -> RunConfig:
    return cfg.replace(options={}, layout=None)


def _ref_key(cfg: RunConfig, mode: str, threads: int | None = None) -> str:
    device = "cuda" if mode == "gpu" else "cpu"  # emulated runs compute on the CPU
    return f"{device}|{threads or 1}|{_reference_config(cfg).key()}"


def reference(name: str, cfg: RunConfig, *, mode: str = "cpu", timeout_s: float = 600.0,
              in_process=None, threads: int | None = None) -> dict:
    """The reference run for `cfg` on the device `mode` computes on, cached per process (the
    tour compares many strategies to one). It computes with `threads` intra-op threads — those of
    one worker of the run it is compared with (default 1) — so its times compare like with like."""
    key = _ref_key(cfg, mode, threads)
    if key in _REFERENCE_CACHE:
        return _REFERENCE_CACHE[key]
    if in_process is None:
        run(name, workers=1, mode="gpu" if mode == "gpu" else "cpu", config=_reference_config(cfg),
            parity=False, timeout_s=timeout_s, threads_per_worker=threads or 1)
        return _REFERENCE_CACHE[key]
    from mgpukit.runtime import context as _context
    from mgpukit.runtime.context import WorkerContext

    p = prepare(name, workers=1, mode="cpu", config=_reference_config(cfg))
    solo = WorkerContext(rank=0, world_size=1, mode=in_process.mode, profile=None,
                         device=in_process.device, t0=in_process.t0, threads=in_process.threads)
    _context.set_current(solo)
    try:
        out = run_rank(name, p.cfg)
    finally:
        _context.set_current(None)
    finish(dataclasses.replace(p, mode=mode), [out["result"]], out["weights"], parity=False)
    return _REFERENCE_CACHE[key]


def _max(diff: torch.Tensor) -> float:
    """The largest element, NaN if any is NaN (torch's max propagates NaN)."""
    return float(diff.max()) if diff.numel() else 0.0


def _nan_max(a: float, b: float) -> float:
    """max() that keeps NaN: Python's `max(0.0, nan)` is 0.0, which reported a NaN run as exact."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def compare(record: dict, weights: dict | None, ref: dict, tol: dict | None) -> dict:
    """Losses, gradient norms and final weights against the reference, elementwise with tolerance."""
    tol = tol or FP32_TOL
    ref_record, ref_weights = ref["record"], ref["weights"]
    checks = {
        "losses": (record["losses"], ref_record["losses"]),
        "grad_norms": (record["grad_norms"], ref_record["grad_norms"]),
    }
    out = {"reference": ref_record["strategy"], "tolerance": dict(tol)}
    ok = True
    worst = 0.0
    for name, (got, want) in checks.items():
        got_t, want_t = torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
        if got_t.shape != want_t.shape:
            out[f"{name}_max_abs_diff"] = math.inf
            ok = False
            continue
        diff = (got_t - want_t).abs()
        out[f"{name}_max_abs_diff"] = _max(diff)
        ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want_t.abs()))
        worst = _nan_max(worst, out[f"{name}_max_abs_diff"])
    if weights is None:
        out["weights_max_abs_diff"] = None
        out["weights_checked"] = False
    else:
        missing = sorted(set(ref_weights) ^ set(weights))
        if missing:
            raise ValueError(f"weights returned by the strategy don't match the reference's names: {missing[:5]}")
        wdiff = 0.0
        for k, want in ref_weights.items():
            got = weights[k].to(want.dtype)
            diff = (got - want).abs()
            wdiff = _nan_max(wdiff, _max(diff))
            ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want.abs()))
        out["weights_max_abs_diff"] = wdiff
        out["weights_checked"] = True
        worst = _nan_max(worst, wdiff)
    out["max_abs_diff"] = worst
    out["ok"] = bool(ok)
    return out
