"""Run a registered strategy inside processes started by `accelerate launch` or `torchrun`.

`scripts/train.py` calls `training_function(name, cfg)`: each process reads its rank from the
launcher's environment, sets up Accelerate's state (with `cpu=True` when there is no GPU — the
trap `mgpukit.launch` closes for notebooks), builds the same device mesh `mgpukit.launch` gives
its workers, and runs the one runner's `run_rank`; rank 0 gathers the per-rank results into the
same result record, with the same parity check, that `mgpukit run` writes (`experiment.finish`).
"""
from __future__ import annotations

import dataclasses
import os
import time

import torch
import torch.distributed as dist

from mgpukit.config import RunConfig
from mgpukit.runtime import context as _context


def training_function(name: str, cfg: RunConfig, *, layout: dict | None = None,
                      json_path: str | None = None, parity: bool = True) -> dict | None:
    from accelerate import PartialState

    from mgpukit.experiment import finish, prepare, run_rank
    from mgpukit.runtime.launcher import build_mesh

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= local
    # validated before the process group exists: a bad configuration costs no rendezvous
    p = prepare(name, workers=world_size, mode="cpu", config=cfg, layout=layout)
    p = dataclasses.replace(p, mode="gpu" if gpu else "cpu")
    state = PartialState(cpu=not gpu)
    if state.num_processes != world_size:
        raise RuntimeError(f"Accelerate sees {state.num_processes} processes but WORLD_SIZE={world_size}.")
    if dist.is_initialized():
        dist.barrier()  # a common origin for every rank's timeline
    ctx = _context.WorkerContext(rank=state.process_index, world_size=world_size, mode=p.mode,
                                 profile=None, device=state.device, t0=time.perf_counter(),
                                 threads=torch.get_num_threads(), dims=p.dims,
                                 mesh=build_mesh(p.dims, state.device))
    _context.set_current(ctx)
    out = run_rank(name, p.cfg)
    results = [None] * world_size
    if dist.is_initialized():
        dist.all_gather_object(results, out["result"])
        dist.barrier()  # nobody tears the group down while a peer still reads from it
        dist.destroy_process_group()
    else:
        results = [out["result"]]
    _context.set_current(None)
    if ctx.rank != 0:
        return None
    return finish(p, results, out["weights"], parity=parity, json_path=json_path, in_process=ctx)
