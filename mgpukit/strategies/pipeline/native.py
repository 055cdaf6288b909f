"""The same pipelines through PyTorch: ``torch.distributed.pipelining``.

Same model split (``stages.split_model``), same micro-batches, PyTorch's runtime:
``PipelineStage`` wraps each stage module (it infers the boundary shapes at the first step
and owns the send/recv buffers) and a schedule — ``ScheduleGPipe``, ``Schedule1F1B``,
``ScheduleInterleaved1F1B`` — runs it; their orders are the tables of
``mgpukit.costmodel.schedules`` (checked in ``tests/test_schedules.py``). PyTorch computes
each micro-batch's loss unscaled and divides the gradients by ``m`` after the step
(``scale_grads=True``): the same full-batch gradient as the hand-written executor.

PyTorch's point-to-point calls do not go through the kit's recorder, so these strategies
cannot run on the virtual clock (``emulation=False``) and their timeline has one
``fwd_bwd`` event per step (the whole schedule, wall clock) and the optimizer step: use them
to check parity and to time the hand-written executor against (``mgpukit bench pipeline``).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from mgpukit.measure.memory import memory_breakdown
from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.common import Batches, build_model, build_optimizer, loss_fn
from mgpukit.strategies.pipeline.pipeline_parallel import PARITY_TOLERANCE
from mgpukit.strategies.pipeline.plan import plan_for, theory, validate
from mgpukit.strategies.pipeline.stages import split_model
from mgpukit.strategies.pipeline.train import _log_steps, gather_weights
from mgpukit.strategies.registry import register


def build_native_schedule(schedule: str, stages: dict, *, num_stages: int, m: int, loss, device):
    """PyTorch's schedule object over this rank's stages (``stages``: index -> module)."""
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)

    pipe_stages = [PipelineStage(mod, s, num_stages, device) for s, mod in sorted(stages.items())]
    if schedule == "interleaved":
        return ScheduleInterleaved1F1B(pipe_stages, m, loss_fn=loss)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    return cls(pipe_stages[0], m, loss_fn=loss)


def run_native(schedule: str, ctx, rec, cfg):
    plan = plan_for(schedule, cfg, ctx.world_size)
    p, rank, n_stages = plan.p, ctx.rank, plan.num_stages
    device = ctx.device
    stages = split_model(build_model(cfg), n_stages,
                         keep=[s for s in range(n_stages) if s % p == rank])
    for mod in stages.values():
        mod.to(device)
    holder = nn.ModuleList(stages.values())
    params = list(holder.parameters())
    optimizer = build_optimizer(cfg, params)
    sched = build_native_schedule(schedule, stages, num_stages=n_stages, m=plan.m,
                                  loss=loss_fn(cfg), device=device)
    first, last = 0 in stages, n_stages - 1 in stages
    batches = Batches(cfg, 0, 1)
    logs = []
    for step in range(cfg.steps):
        x, y = batches(step)
        x, y = x.to(device), y.to(device)
        losses: list = []
        with rec.step(step):
            with rec.compute("fwd_bwd"):
                sched.step(*((x,) if first else ()), target=y if last else None,
                           losses=losses if last else None, return_outputs=False)
            sq_norm = sum(float(q.grad.detach().double().pow(2).sum()) for q in params
                          if q.grad is not None)
            with rec.compute("opt"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
        loss = float(torch.stack([t.detach() for t in losses]).mean()) if last else 0.0
        logs.append([loss, sq_norm])
    _log_steps(rec, logs, device)
    rec.memory = memory_breakdown(holder, optimizer, None, device)
    rec.memory["source"] += "; activations not metered (inside torch.distributed.pipelining)"
    rec.extra.update({"schedule": schedule, "p": p, "m": plan.m, "v": plan.v,
                      "runtime": "torch.distributed.pipelining"})
    out = gather_weights(rec, holder, device)
    rec.comm_counted = False  # the pipelining runtime sends its own activations, unseen by us
    if dist.is_initialized():
        with rec.clock.paused():
            dist.barrier()  # PipelineStage's last sends may still be in flight
    return out


def _register(name: str, schedule: str, description: str):
    def worker(ctx, rec, cfg):
        return run_native(schedule, ctx, rec, cfg)

    worker.__name__ = f"run_{name.replace('-', '_')}"
    worker.__doc__ = description
    register(name, family="pipeline", description=description, emulation=False,
             dims=lambda n: ParallelDims(pp=n), theory=theory(schedule),
             validate=validate(schedule), tolerance=PARITY_TOLERANCE)(worker)
    return worker


run_pp_native_gpipe = _register("pp-native-gpipe", "gpipe",
                                "torch.distributed.pipelining ScheduleGPipe (wall clock only)")
run_pp_native_1f1b = _register("pp-native-1f1b", "1f1b",
                               "torch.distributed.pipelining Schedule1F1B (wall clock only)")
run_pp_native_interleaved = _register(
    "pp-native-interleaved", "interleaved",
    "torch.distributed.pipelining ScheduleInterleaved1F1B, v chunks per rank (wall clock only)")
