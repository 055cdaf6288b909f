"""The pipeline applier: cut the model into stages on the pp axis, and the engine that runs a
schedule for the one trainer.

Per rank: keep only this rank's stages of the model (stage ``s`` on the pp rank ``s % p`` of
this rank's pipeline — ``ctx.axis_ranks("pp")``), and for every step split this replica's batch
into ``m`` micro-batches and run this rank's column of the schedule table with the executor.
The trainer does the rest (gradient sync over dp, optimizer step, logging: the loss lives on
the last stage, the gradient norm is summed over the stages).

What the engine adds to ``rec.extra`` after training (all "measured" by the run itself — wall
clock, or the virtual clock in emulated mode): ``bubble_fraction`` (from the timeline,
``measure.idle``), ``idle_s`` and ``busy_s`` per rank, ``activations_in_flight_peak`` (bytes,
``ActivationMeter``), ``activation_bytes_per_microbatch``, ``microbatches_in_flight_measured``
(their ratio) and ``microbatches_in_flight`` (counted by the executor).
"""
from __future__ import annotations

import contextlib

import torch.nn as nn

from mgpukit.costmodel.schedules import build_schedule
from mgpukit.measure.idle import measure_bubble
from mgpukit.measure.shape import value_or_none
from mgpukit.models.weights import full_state_dict, to_device
from mgpukit.strategies.pipeline.executor import PipelineExecutor, PipelineMeter
from mgpukit.strategies.pipeline.native import NativePipelineEngine
from mgpukit.strategies.pipeline.p2p import StageLinks, plan_rounds
from mgpukit.strategies.pipeline.stages import boundary_shape, split_model
from mgpukit.training.parts import NoSync, Parts


class PipelineEngine:
    """Runs this rank's actions of ``schedule`` once per step (``forward_backward``)."""

    memory_note = None  # the executor meters every micro-batch's saved activations

    def __init__(self, ctx, rec, stages: dict, *, model: nn.Module, schedule: str, m: int, v: int,
                 loss_fn, micro_batch_rows: int, sync=None, seq_shards: int = 1):
        p, pp_rank = ctx.size("pp"), ctx.coords["pp"]
        stage_ranks = ctx.axis_ranks("pp")
        self.rec, self.m, self.schedule, self.p, self.v = rec, m, schedule, p, v
        self.stages = stages
        self.meter = PipelineMeter([q for st in stages.values() for q in st.parameters()])
        self.links = StageLinks(rec, ctx, stage_rank=lambda s: stage_ranks[s % p], device=ctx.device,
                                shape=boundary_shape(model, micro_batch_rows, seq_shards=seq_shards))
        self.executor = PipelineExecutor(rec, stages, num_stages=p * v, links=self.links,
                                         loss_fn=loss_fn, meter=self.meter,
                                         split_backward=schedule == "zb-h1")
        self.rounds = plan_rounds(build_schedule(schedule, p, m, v))[pp_rank]  # p2p.py
        self.pp_group = ctx.group("pp")
        self.device = ctx.device
        self.sync = sync  # the dp gradient sync: it waits until the whole schedule has run

    def forward_backward(self, x, y, compute_ctx=contextlib.nullcontext):
        # one tensor per micro-batch (as a loader would give them: the meter counts storages)
        xs = [c.detach().clone() for c in x.chunk(self.m)]
        ys = [c.clone() for c in y.chunk(self.m)]
        if x.requires_grad:  # an input that wants a gradient (the lab's): one leaf each
            xs = [c.requires_grad_() for c in xs]
        with (self.sync.no_sync() if self.sync is not None else contextlib.nullcontext()):
            loss = self.executor.run_step(self.rounds, xs, ys)
        return value_or_none(loss)  # None also in shape mode (a fake loss has no value)

    def finish(self, steps: int) -> dict:
        out = measure_bubble(self.rec, steps, group=self.pp_group, device=self.device) or {}
        per_mb = self.executor.bytes_per_microbatch or 0
        out.update({
            "schedule": self.schedule, "p": self.p, "m": self.m, "v": self.v,
            "stages": sorted(self.stages),
            "activations_in_flight_peak": self.meter.peak,
            "activation_bytes_per_microbatch": per_mb,
            "microbatches_in_flight_measured": self.meter.peak / per_mb if per_mb else None,
            "microbatches_in_flight": self.executor.in_flight_peak,
        })
        return out


def apply_pipeline(ctx, rec, model: nn.Module, layout, loss_fn, *, grad_sync=None,
                   runtime: str = "ours") -> Parts:
    """The pipeline applier: this rank's stages of `model` on the pp axis, their gradients
    synchronised over dp by `grad_sync(holder) -> (holder, sync)`, and the engine that runs
    `layout.schedule` (``runtime``: "ours", the kit's executor, or "native", PyTorch's). The
    pipeline degree is the mesh's (`ctx.size("pp")`); schedule, m, v and an uneven split
    (`stage_layers`) are the layout's."""
    p = ctx.size("pp")
    stages = split_for_rank(ctx, model, p * layout.v, layout.stage_layers)
    holder = nn.ModuleList(stages.values())  # this rank's share, for the optimizer and memory
    holder, sync = grad_sync(holder) if grad_sync is not None else (holder, NoSync())
    if runtime == "native":
        engine = NativePipelineEngine(ctx, rec, stages, schedule=layout.schedule,
                                      m=layout.num_micro_batches, v=layout.v, loss_fn=loss_fn)
    else:
        engine = PipelineEngine(ctx, rec, stages, model=model, schedule=layout.schedule,
                                m=layout.num_micro_batches, v=layout.v, loss_fn=loss_fn,
                                micro_batch_rows=layout.micro_batch, sync=sync,
                                seq_shards=ctx.size("tp") if layout.sp else 1)
    return Parts(module=holder, engine=engine, sync=sync, params=list(holder.parameters()),
                 holds_loss=p * layout.v - 1 in stages,
                 state_dict=lambda: stages_state_dict(holder))


def split_for_rank(ctx, model: nn.Module, num_stages: int, stage_layers=None) -> dict:
    """This rank's stages (index -> module), moved to its device; the other layers dropped.
    `stage_layers`: layers per stage for an uneven split (`stages.split_model`)."""
    p, pp_rank = ctx.size("pp"), ctx.coords["pp"]
    stages = split_model(model, num_stages, keep=[s for s in range(num_stages) if s % p == pp_rank],
                         stage_layers=stage_layers)
    for stage in stages.values():
        to_device(stage, ctx.device)
    return stages


def stages_state_dict(holder: nn.ModuleList) -> dict:
    """This rank's stage weights with the unsplit model's names (``ModuleList`` adds "0.", "1."
    in front of each stage's full-model names)."""
    return {k.split(".", 1)[1]: v for k, v in full_state_dict(holder).items()}
