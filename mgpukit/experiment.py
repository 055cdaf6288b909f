"""The one runner: validate -> launch -> record -> parity, for every way a run is started.

`mgpukit run`, `mgpukit.run`, the notebooks, the tour, the benchmarks and the exported scripts
(`mgpukit.launched`, under `torchrun` / `accelerate launch`) all go through `prepare` (every
check, before anything starts), `run_rank` (what each worker does) and `finish_run` (the record,
its parity, the files):

    rec = mgpukit.run("ddp", workers=2, steps=20)
    rec = mgpukit.run("pp-1f1b", workers=4, layout={"dp": 2, "pp": 2})      # dp × pp
    rec["parity"]["ok"], rec["tokens_per_s"], rec["layout"]

Parity (`mgpukit.parity`): the strategy's losses, gradient norms and final weights against the
`single` reference trained on the same global batches, in `finish_run`. A run *is* the reference
(`single`, no parity) or *has no* reference (`ps-async`): the record says which.

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
import os
import tempfile
import time
from pathlib import Path

import torch

from mgpukit import strategies
from mgpukit.config import SHAPE_MODELS, RunConfig
from mgpukit.files import OutputError, check_output, export_profiler_trace, write_all, write_bytes
from mgpukit.fits import check_fits
from mgpukit.limits import check_seconds, check_threads
from mgpukit.measure.device_guard import DeviceGuard
from mgpukit.measure.progress import follow
from mgpukit.measure.record import build_record, save_chrome_trace, save_record
from mgpukit.measure.recorder import Recorder
from mgpukit.measure.shape import maybe as maybe_fake
from mgpukit.parallelize import parallelize
from mgpukit.parity import check_parity
from mgpukit.prepare import Prepared, check_outputs, default_collective_timeout, prepare
from mgpukit.costmodel.layout import Layout
from mgpukit.runtime.context import WorkerContext, worker_context
from mgpukit.runtime.hardware import env_info, placement
from mgpukit.runtime.launcher import WorkerError, launch
from mgpukit.strategies.registry import Strategy
from mgpukit.threads import policy as thread_policy
from mgpukit.training.building import build_model, build_optimizer
from mgpukit.training.checkpoint import checkpointing, has_checkpoint
from mgpukit.training.checkpoint_data import check_folder
from mgpukit.training.checkpoint_files import FolderLock
from mgpukit.training.hooks import Progress
from mgpukit.training.knob_hooks import hooks_for
from mgpukit.training.trainer import train

_REFERENCE_CACHE: dict[str, dict] = {}


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
    for name, value in (("parity", parity), ("echo", echo), ("debug_collectives", debug_collectives)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}={value!r}: give True or False.")
    if tolerance is not None and not isinstance(tolerance, dict):
        raise TypeError(f"tolerance={tolerance!r}: give a dict like {{'rtol': 1e-5, 'atol': 1e-6}}.")
    check_seconds("timeout_s", timeout_s)  # the stated bounds (mgpukit.limits): before any fork
    if collective_timeout_s is not None:
        check_seconds("collective_timeout_s", collective_timeout_s)
    check_threads("threads_per_worker", threads_per_worker)
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
    root = p.cfg.options.get("checkpoint_dir")
    if root:
        check_output(root, what="checkpoint folder (checkpoint_dir)", directory=True)
    memory_check = {} if p.shape else check_fits(  # real scale: refused here if it cannot fit
        p.cfg, p.cfg.layout, workers=p.workers, mode=p.mode, strategy=p.strategy.name,
        parity=parity and p.strategy.reference is not None)
    lock = FolderLock(root).acquire() if root else None  # one run per checkpoint folder
    try:
        if root:
            check_folder(p.cfg)  # resume: there, whole, this model and optimizer, steps left
        results, p, restarts = _launch_with_restarts(
            p, max_restarts, timeout_s=timeout_s, echo=echo, threads_per_worker=threads_per_worker,
            collective_timeout_s=min(collective_timeout_s, timeout_s), debug_collectives=debug_collectives,
            options={"torch_profile_dir": str(torch_profile_dir) if torch_profile_dir else None,
                     "shape": p.shape, "checkpoint_verified": bool(root)})  # check_folder did
    finally:
        if lock is not None:
            lock.release()
    record = finish_run(p, [r["result"] for r in results], results[0].get("weights"), parity=parity,
                    tolerance=tolerance, timeout_s=timeout_s)
    record["restarts"] = restarts
    record["memory_check"] = memory_check
    write_outputs(record, results[0].get("weights"), json_path=json_path, trace_path=trace_path,
                  weights_path=weights_path, failed=[r["output_error"] for r in results
                                                     if r.get("output_error")])
    return record


def _launch_with_restarts(p: Prepared, max_restarts: int, **launch_kw) -> tuple[list, Prepared, list]:
    """Launch `p`; when a rank dies, go on from the last checkpoint up to `max_restarts` times.
    Returns (each rank's result, the run as it ran last — resumed after a restart —, the
    restarts). A rank that stopped on purpose (a NaN, a full disk: `WorkerError.one_line`) is
    not restarted: it would stop again the same way."""
    restarts = []
    base_options = launch_kw.pop("options", {})
    while True:
        try:
            with progress_bar(p) as progress_file:
                options = {**base_options, "progress_file": progress_file}
                results = launch(run_rank, p.workers, p.strategy.name, p.cfg, mode=p.mode, profile=p.profile,
                                 dims=p.dims, layout=p.layout, options=options, takes_context=True,
                                 **launch_kw)
            return results, p, restarts
        except WorkerError as e:  # a rank died: go on from the last checkpoint, if there is one
            root = p.cfg.options.get("checkpoint_dir")
            if len(restarts) >= max_restarts or e.one_line or not has_checkpoint(root):
                raise
            restarts.append({"error": str(e).splitlines()[0], "rank": e.rank})
            p = dataclasses.replace(p, cfg=p.cfg.replace(options={**p.cfg.options, "resume": True}))
            check_folder(p.cfg)  # what the failed run saved last is whole


def progress_bar(p: Prepared):
    """A tqdm bar in this process for a real-scale model trained on CPU workers (minutes per
    step: `measure/progress.py`); the path the workers write to, or None for everything else."""
    if p.shape or p.cfg.model not in SHAPE_MODELS or p.mode == "gpu":
        return contextlib.nullcontext(None)
    path = os.path.join(tempfile.gettempdir(), f"mgpukit-progress-{os.getpid()}-{time.monotonic_ns()}")
    return follow(path, steps=p.cfg.steps, desc=f"{p.cfg.model} · {p.strategy.name} ({p.mode})")


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


def run_each(runs: list[Prepared], *, timeout_s: float = 600.0, echo: bool = False) -> list[dict]:
    """Several prepared runs on the same workers, one after the other in ONE launch, each
    recorded as `run` records it, without parity (a launch costs seconds on a small machine;
    notebook 04 compares 13 pipeline schedules: `mgpukit.lessons.pipeline_lab`).

    Every run must have the same mesh, mode and profile (they share the workers); each rank runs
    `run_rank` per run, its context carrying that run's prepared layout (`WorkerContext.with_layout`)."""
    first = runs[0]
    for p in runs[1:]:
        if (p.dims, p.mode, p.profile, p.shape) != (first.dims, first.mode, first.profile, first.shape):
            raise ValueError(f"run_each launches once: every run needs the mesh {first.dims.as_dict()}, "
                             f"mode {first.mode!r} and profile of the first; {p.strategy.name} differs.")
    results = launch(run_ranks, first.workers, [(p.strategy.name, p.cfg, p.layout) for p in runs],
                     takes_context=True, mode=first.mode,
                     profile=first.profile, dims=first.dims, layout=first.layout, timeout_s=timeout_s,
                     echo=echo, collective_timeout_s=min(timeout_s, max(
                         default_collective_timeout(p.cfg, p.mode, shape=p.shape) for p in runs)),
                     options={"shape": first.shape})
    return [finish_run(p, [r[k]["result"] for r in results], results[0][k].get("weights"), parity=False)
            for k, p in enumerate(runs)]


def run_ranks(ctx: WorkerContext, runs: list[tuple[str, RunConfig, Layout]]) -> list[dict]:
    """What every rank runs for `run_each`: `run_rank` per run, under that run's prepared layout."""
    return [run_rank(ctx.with_layout(layout), name, cfg) for name, cfg, layout in runs]


def run_rank(ctx: WorkerContext, name: str, cfg: RunConfig):
    """What every rank runs: the strategy with a recorder (optional torch.profiler trace).

    An unmodified model -> the layout's appliers (`parallelize`) -> the one trainer; a strategy
    with a topology of its own (the parameter server) runs its `worker` instead. `ctx`: this
    worker's context, handed by the launch (`launch(..., takes_context=True)`)."""
    if ctx.options.get("shape") and ctx.device.type == "cpu":
        # fake tensors tell "cpu" (where the model is built) from "cpu:0" (Accelerate's name)
        ctx = dataclasses.replace(ctx, device=torch.device("cpu"))
    torch.manual_seed(cfg.seed)
    rec = Recorder(ctx)
    strat = strategies.get(name)
    prof_dir = ctx.options.get("torch_profile_dir")
    if prof_dir:
        # here, not at the top: `profile` is also `run`'s hardware-profile argument
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

        with DeviceGuard():
            return _train_unguarded(strat, ctx, rec, cfg)
    return _train_unguarded(strat, ctx, rec, cfg)


def _train_unguarded(strat: Strategy, ctx, rec, cfg) -> dict | None:
    if strat.worker is not None:
        return (strat.worker(ctx, rec, cfg) or {}).get("weights")
    parts = parallelize(build_model(cfg), cfg, ctx, rec, strat)
    optimizer = build_optimizer(cfg, parts.params, ctx)
    saving = checkpointing(ctx, rec, cfg, parts, optimizer)  # resume: loaded here, before the loop
    return train(ctx, rec, cfg, parts, optimizer,
                 hooks=[Progress(), *hooks_for(cfg, ctx.world_size), *([saving] if saving else [])])


def finish_run(p: Prepared, ranks: list[dict], weights: dict | None, *, parity: bool = True,
           tolerance: dict | None = None, timeout_s: float = 600.0, json_path=None, trace_path=None,
           weights_path=None, in_process=None) -> dict:
    """The record from every rank's result, its parity, and the files asked for.

    `in_process`: a worker context to train the reference in this very process (a script under
    `torchrun`, rank 0, after its group is gone) instead of launching it."""
    strat, cfg = p.strategy, p.cfg
    record = build_record(
        strategy=strat.name, mode=str(p.mode), profile=_profile_name(p.profile), dims=p.dims.as_dict(),
        config=cfg.as_dict(), ranks=ranks, tokens_per_step=cfg.tokens_per_step(), env=env_info(),
        theory=strat.theory(cfg, p.dims) if strat.theory else None,
    )
    record["layout"] = dataclasses.asdict(cfg.layout)
    record["shape"] = p.shape
    if p.model_note:  # the strategy ran its own default model, not the kit's
        record["model_note"] = p.model_note
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
    elif unlike_reference := [h.no_parity for h in hooks_for(cfg, p.workers) if h.no_parity]:
        record["parity"] = None  # a hook trains other numbers than the reference, on purpose
        record["reference"] = "; ".join(unlike_reference)
    elif parity:
        ref = reference(strat.reference, cfg, mode=p.mode, timeout_s=timeout_s, in_process=in_process,
                        threads=record["threads"]["per_worker"])
        record["parity"] = check_parity(record, weights, ref, strategy=strat, layout=p.layout,
                                        tolerance=tolerance)
        record["reference"] = strat.reference
    write_outputs(record, weights, json_path=json_path, trace_path=trace_path, weights_path=weights_path)
    return record


def _profile_name(profile):
    return getattr(profile, "name", profile)


def save_weights(weights: dict | None, path: str | Path) -> Path:
    """The trained, unsharded weights as safetensors (no pickle: safe to load anywhere)."""
    # lazy: start-up (only a run that saves or loads weights needs it)
    from safetensors.torch import save

    if weights is None:
        raise ValueError("this strategy returned no weights to save.")
    # serialised in memory, written by `write_bytes`: a failed write is an OSError with its
    # cause (safetensors' own writer reports a full disk as an opaque error) and the older file
    # is left whole
    return write_bytes(path, save({k: v.contiguous() for k, v in weights.items()}),
                       what="weights (--save-weights)")


def load_weights(path: str | Path) -> dict:
    # lazy: start-up (only a run that saves or loads weights needs it)
    from safetensors.torch import load_file

    return load_file(str(path))


def is_reference_layout(layout) -> bool:
    """The reference trains at torch's fp32 defaults with every activation kept; a `single` run
    with a policy (checkpointing, bf16) is a run like any other, never the cached reference."""
    return layout is None or (layout.dtype == "fp32" and layout.checkpointing == "none")


def _reference_config(cfg: RunConfig) -> RunConfig:
    """The run without its layout and strategy knobs — but the same model: `model_sizes` (a
    sequence length, the experts of an MoE) says which model it is, so the reference keeps it."""
    sizes = cfg.options.get("model_sizes")
    return cfg.replace(options={"model_sizes": sizes} if sizes else {}, layout=None)


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
    p = prepare(name, workers=1, mode="cpu", config=_reference_config(cfg))
    solo = worker_context(rank=0, world_size=1, mode=in_process.mode, device=in_process.device,
                          t0=in_process.t0, threads=in_process.threads, dims=p.dims, layout=p.layout,
                          mesh=False)
    out = run_rank(solo, name, p.cfg)
    finish_run(dataclasses.replace(p, mode=mode), [out["result"]], out["weights"], parity=False)
    return _REFERENCE_CACHE[key]
