"""Run a registered strategy inside processes started by `accelerate launch` or `torchrun`.

The exported scripts in `scripts/` call `training_function(name, cfg)`: each process reads its
rank from the launcher's environment, sets up Accelerate's state (with `cpu=True` when there is
no GPU — the trap `mgpukit.launch` closes for notebooks), trains with a recorder, and rank 0
gathers the per-rank results into the same result record `mgpukit run` writes.
"""
from __future__ import annotations

import os
import time
import warnings

import torch
import torch.distributed as dist

from mgpukit.config import RunConfig
from mgpukit.runtime import context as _context


def training_function(name: str, cfg: RunConfig, *, json_path: str | None = None,
                      parity: bool = True) -> dict | None:
    from accelerate import PartialState

    from mgpukit.experiment import FP32_TOL, compare
    from mgpukit.measure.record import build_record, save_record
    from mgpukit.measure.recorder import Recorder
    from mgpukit.runtime.hardware import env_info
    from mgpukit.strategies import registry

    strat = registry.get(name)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    state = PartialState(cpu=not gpu)
    # `accelerate launch --mixed_precision bf16` exports ACCELERATE_MIXED_PRECISION. The kit's
    # strategies train in fp32 and build their Accelerator with mixed_precision="no", so the
    # flag is not applied: say so, rather than let the record and the launch line disagree.
    requested = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if requested != "no" and state.process_index == 0:
        warnings.warn(f"accelerate launch asked for mixed_precision={requested!r}; mgpukit's "
                      f"strategies run in fp32 (mixed_precision='no'), so it is not applied.",
                      stacklevel=2)
    if state.num_processes != world_size:
        raise RuntimeError(f"Accelerate sees {state.num_processes} processes but WORLD_SIZE={world_size}.")
    dims = strat.dims(world_size)
    if dist.is_initialized():
        dist.barrier()  # a common origin for every rank's timeline
    ctx = _context.WorkerContext(rank=state.process_index, world_size=world_size,
                                 mode="gpu" if gpu else "cpu", profile=None, device=state.device,
                                 t0=time.perf_counter(), threads=torch.get_num_threads())
    _context.set_current(ctx)
    rec = Recorder(ctx)
    torch.manual_seed(cfg.seed)
    out = strat.run(ctx, rec, cfg) or {}
    rec.extra.setdefault("mixed_precision", "no")
    results = [None] * world_size
    if dist.is_initialized():
        dist.all_gather_object(results, rec.result())
        dist.barrier()  # nobody tears the group down while a peer still reads from it
        dist.destroy_process_group()
    else:
        results = [rec.result()]
    if ctx.rank != 0:
        return None
    record = build_record(strategy=name, mode=ctx.mode, profile=None, dims=dims.as_dict(),
                          config=cfg.as_dict(), ranks=results,
                          tokens_per_step=cfg.tokens_per_step(), env=env_info(),
                          theory=strat.theory(cfg, dims) if strat.theory else None)
    if parity and strat.reference:
        record["parity"] = compare(record, out.get("weights"), _reference(strat.reference, cfg, ctx),
                                   strat.tolerance or FP32_TOL)
    if json_path:
        save_record(record, json_path)
    return record


def _reference(name: str, cfg: RunConfig, ctx) -> dict:
    """Train the reference in this process (rank 0, after the group is gone)."""
    from mgpukit.measure.recorder import Recorder
    from mgpukit.strategies import registry

    solo = _context.WorkerContext(rank=0, world_size=1, mode=ctx.mode, profile=None,
                                  device=ctx.device, t0=time.perf_counter(), threads=ctx.threads)
    rec = Recorder(solo)
    torch.manual_seed(cfg.seed)
    out = registry.get(name).run(solo, rec, cfg.replace(options={})) or {}
    result = rec.result()
    return {"record": {"strategy": name, "losses": result["losses"],
                       "grad_norms": result["grad_norms"]}, "weights": out.get("weights")}
