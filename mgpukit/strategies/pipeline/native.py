"""The same pipelines through PyTorch: ``torch.distributed.pipelining``.

Same model split (``stages.split_model``), same micro-batches, PyTorch's runtime:
``PipelineStage`` wraps each stage module (it infers the boundary shapes at the first step
and owns the send/recv buffers) and a schedule — ``ScheduleGPipe``, ``Schedule1F1B``,
``ScheduleInterleaved1F1B`` — runs it; their orders are the tables of
``mgpukit.costmodel.schedules`` (checked in ``tests/test_schedules.py``). PyTorch computes
each micro-batch's loss unscaled and divides the gradients by ``m`` after the step
(``scale_grads=True``): the same full-batch gradient as the hand-written executor.

PyTorch's point-to-point calls do not go through the kit's recorder: a ``CommObserver``
(``mgpukit.measure.observe``) sees them at the dispatcher and counts and times them as the
recorder would. The timeline has one ``fwd_bwd`` compute event per step (the whole schedule)
beside the observed sends and receives; these strategies run on the wall clock only
(``emulation=False``): use them to check parity and to time the hand-written executor against
(``mgpukit bench pipeline``).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from mgpukit.measure.observe import CommObserver
from mgpukit.strategies.pipeline.pipeline_parallel import register_pipeline


def build_native_schedule(schedule: str, stages: dict, *, num_stages: int, m: int, loss, device,
                          group=None):
    """PyTorch's schedule object over this rank's stages (``stages``: index -> module), its
    point-to-point on ``group`` (the pp axis)."""
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)

    pipe_stages = [PipelineStage(mod, s, num_stages, device, group=group)
                   for s, mod in sorted(stages.items())]
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
                                           device=ctx.device, group=ctx.group("pp"))
        self.first, self.last = 0 in stages, n_stages - 1 in stages
        self.meter = None  # activations live inside torch.distributed.pipelining: not metered
        self.memory_note = "activations not metered (inside torch.distributed.pipelining)"
        self.pp_group = ctx.group("pp")
        # the pipelining runtime sends its own activations; the observer counts and times them
        # at the dispatcher (`measure.observe`), the way the recorder counts its own
        self.observer = CommObserver(rec)

    def forward_backward(self, x, y, slowed):
        losses: list = []
        with self.rec.compute("fwd_bwd"), self.observer:
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
