"""The same pipelines through PyTorch: ``torch.distributed.pipelining``.

Same model split (``stages.split_model``), same micro-batches, PyTorch's runtime:
``PipelineStage`` wraps each stage module (it infers the boundary shapes at the first step
and owns the send/recv buffers) and a schedule — ``ScheduleGPipe``, ``Schedule1F1B``,
``ScheduleInterleaved1F1B`` — runs it; their orders are the tables of
``mgpukit.costmodel.schedules`` (checked in ``tests/test_schedules.py``). PyTorch computes
each micro-batch's loss unscaled and divides the gradients by ``m`` after the step
(``scale_grads=True``): the same full-batch gradient as the hand-written executor.

PyTorch's point-to-point calls do not go through the kit's recorder: their bytes are counted
from the ops each ``PipelineStage`` hands its schedule (``count_p2p``), not timed. The
timeline has one ``fwd_bwd`` event per step (the whole schedule) and the optimizer step;
these strategies run on the wall clock only
(``emulation=False``): use them to check parity and to time the hand-written executor against
(``mgpukit bench pipeline``).
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from mgpukit.strategies.pipeline.pipeline_parallel import register_pipeline


def count_p2p(stage, rec) -> None:
    """Count the activations and gradients `stage` sends and receives: the point-to-point ops
    it hands its schedule (`get_{fwd,bwd}_{send,recv}_ops`, PipelineStage's public methods),
    bytes as the recorder counts its own. Not timed: they complete inside the schedule.

    Why not the `CommObserver` (which sees them at the dispatcher, timed): a Python dispatch
    mode around the whole schedule step runs every compute op through Python too, which
    measured 96 -> 180-210 ms per step for pp-native-1f1b (gpt-tiny, 4 CPU workers, m=8) —
    a measurement must not double what it measures."""
    def counted(get_ops, kind):
        def wrapper(*args, **kwargs):
            ops = get_ops(*args, **kwargs)
            for op in ops:
                nbytes = op.tensor.numel() * op.tensor.element_size()
                rec.count(kind, nbytes, nbytes if kind == "send" else 0, nbytes if kind == "recv" else 0)
            return ops
        return wrapper

    for direction in ("fwd", "bwd"):
        for kind in ("send", "recv"):
            name = f"get_{direction}_{kind}_ops"
            setattr(stage, name, counted(getattr(stage, name), kind))


def build_native_schedule(schedule: str, stages: dict, *, num_stages: int, m: int, loss, device,
                          group=None, rec=None):
    """PyTorch's schedule object over this rank's stages (``stages``: index -> module), its
    point-to-point on ``group`` (the pp axis)."""
    # lazy: start-up (torch.distributed.pipelining imports in ~1 s; only pp-native runs it)
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)

    pipe_stages = [PipelineStage(mod, s, num_stages, device, group=group)
                   for s, mod in sorted(stages.items())]
    if rec is not None:
        for stage in pipe_stages:
            count_p2p(stage, rec)
    if schedule == "interleaved":
        return ScheduleInterleaved1F1B(pipe_stages, m, loss_fn=loss)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    return cls(pipe_stages[0], m, loss_fn=loss)


class NativePipelineEngine:
    """PyTorch's schedule over this rank's stages, run once per step for the one trainer."""

    def __init__(self, ctx, rec, stages: dict, *, schedule: str, m: int, v: int, loss_fn):
        n_stages = ctx.size("pp") * v
        self.rec, self.schedule, self.m, self.v, self.p = rec, schedule, m, v, ctx.size("pp")
        self.sched = build_native_schedule(schedule, stages, num_stages=n_stages, m=m, loss=loss_fn,
                                           device=ctx.device, group=ctx.group("pp"), rec=rec)
        self.first, self.last = 0 in stages, n_stages - 1 in stages
        self.meter = None  # activations live inside torch.distributed.pipelining: not metered
        self.memory_note = "activations not metered (inside torch.distributed.pipelining)"
        self.pp_group = ctx.group("pp")
        rec.extra["comm_timing"] = "not timed: the sends and receives run inside torch.distributed.pipelining"

    def forward_backward(self, x, y, compute_ctx=contextlib.nullcontext):
        losses: list = []
        with self.rec.compute("fwd_bwd"):
            self.sched.step(*((x,) if self.first else ()), target=y if self.last else None,
                            losses=losses if self.last else None, return_outputs=False)
        return float(torch.stack([t.detach() for t in losses]).mean()) if self.last else None

    def finish(self, steps: int) -> dict:
        if self.pp_group is not None:
            with self.rec.untimed():
                dist.barrier(group=self.pp_group)  # PipelineStage's last sends may still be in flight
        return {"schedule": self.schedule, "p": self.p, "m": self.m, "v": self.v,
                "runtime": "torch.distributed.pipelining"}


register_pipeline("pp-native-gpipe", "gpipe", "torch.distributed.pipelining ScheduleGPipe (wall clock only)",
                  runtime="native", emulation=False)
register_pipeline("pp-native-1f1b", "1f1b", "torch.distributed.pipelining Schedule1F1B (wall clock only)",
                  runtime="native", emulation=False)
register_pipeline("pp-native-interleaved", "interleaved",
                  "torch.distributed.pipelining ScheduleInterleaved1F1B, v chunks per rank (wall clock only)",
                  runtime="native", emulation=False)
