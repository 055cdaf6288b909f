"""Apply a run's parallel layout to an unmodified model, in one documented order.

    tensor parallel (tp)  ->  activation checkpointing  ->  pipeline split (pp)
        ->  data-parallel gradient sync (dp), or sharding over dp (ZeRO / FSDP)
    [mixed precision: a policy applied with checkpointing, `strategies.policies.precision`]

the order torchtitan's `parallelize_*` uses: TP rewrites the layers themselves, checkpointing
wraps whole blocks, the pipeline cuts the (wrapped) blocks into stages, and data parallelism
synchronises the gradients of whatever this rank holds. Each step is an applier on its own
mesh axis (`ctx.group("tp" | "pp" | "dp")`); the model knows nothing of any of them.

`resolve_layout` turns a strategy and a run configuration into the one validated `Layout` —
the same object the cost model predicts from (`mgpukit.costmodel.plan`), so a run and its
prediction describe the same thing by construction.
"""
from __future__ import annotations

import dataclasses
import math

import torch.distributed as dist
import torch.nn as nn

from mgpukit.costmodel.layout import Layout
from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.data_parallel.naive import apply_allreduce_dp
from mgpukit.strategies.pipeline.engine import apply_pipeline
from mgpukit.strategies.pipeline.plan import plan_for
from mgpukit.strategies.policies.checkpointing import apply_checkpointing, check_checkpointing
from mgpukit.strategies.policies.precision import LossScaler, apply_mixed_precision, check_precision
from mgpukit.strategies.registry import Strategy
from mgpukit.strategies.tensor_parallel.apply import apply_tp, check_divides
from mgpukit.strategies.tensor_parallel.native import apply_tp_native
from mgpukit.training.building import full_state_dict, loss_fn, to_device
from mgpukit.training.hetero import loss_weight, weighted
from mgpukit.training.local import LocalEngine
from mgpukit.training.parts import NoSync, Parts

LAYOUT_FIELDS = ("dp", "tp", "pp", "schedule", "v", "zero", "sp", "checkpointing", "dtype", "stage_layers")


def resolve_layout(strat: Strategy, cfg, workers: int | None, overrides: dict | None = None) -> Layout:
    """The validated layout of `strat` on `workers` ranks with the user's `overrides`
    (dp, pp, schedule, v …); raises ValueError saying what to change."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(overrides) - set(LAYOUT_FIELDS)
    if unknown:
        raise ValueError(f"unknown layout field(s) {sorted(unknown)}; use {', '.join(LAYOUT_FIELDS)}.")
    if overrides.get("zero", 0) != 0:
        raise ValueError(f"zero={overrides['zero']!r} is not available as a layout override: the ZeRO "
                         f"stage comes with its strategy — run zero1, zero2, zero3 or fsdp2.")
    if workers is None:
        dims = {k: overrides.get(k, 1) for k in ("dp", "tp", "pp")}
        workers = (dims["dp"] * dims["tp"] * dims["pp"] if {"dp", "tp", "pp"} & set(overrides)
                   else strat.default_workers)
    base = strat.layout(workers)
    degrees = {k: overrides.get(k, getattr(base, k)) for k in ("dp", "tp", "pp")}
    # the strategy's own degree, if left out, is inferred from the worker count
    # (pp-1f1b --dp 2 on 4 workers: pp=2; dp-naive --tp 2 on 4: dp=2; tp --dp 2 on 4: tp=2)
    if degrees["dp"] * degrees["tp"] * degrees["pp"] != workers:
        free = [k for k in ("dp", "tp", "pp") if k not in overrides]
        own = [k for k in free if getattr(base, k) > 1]
        pick = (own if len(own) == 1 else free if len(free) == 1
                else ["dp"] if "dp" in free and "dp" in own else [])  # hybrid: dp takes the rest
        if pick:
            others = math.prod(d for k, d in degrees.items() if k != pick[0])
            degrees[pick[0]] = max(1, workers // others)
    ParallelDims(**degrees, world_size=workers)  # raises with what to change
    if base.tp > 1 and degrees["tp"] == 1 and "tp" not in strat.composes:
        raise ValueError(f"{strat.name} splits layers over tensor-parallel ranks; it needs tp >= 2 "
                         f"(got tp=1 on {workers} workers). Give --tp 2 (or more workers).")
    schedule = overrides.get("schedule", base.schedule)
    if strat.schedule and schedule != strat.schedule:
        raise ValueError(f"{strat.name} runs the {strat.schedule!r} schedule; for {schedule!r} run the "
                         f"pipeline strategy of that schedule (`mgpukit list`).")
    if degrees["tp"] > 1 and not base.tp > 1 and "tp" not in strat.composes:
        raise ValueError(f"{strat.name} cannot be combined with tensor parallelism (tp={degrees['tp']}); "
                         f"composable with tp: dp-naive, dp-bucketed, hybrid (dp × tp × pp), or a "
                         f"tensor-parallel strategy (tp, tp-sp, tp-native) with --dp.")
    sp = bool(overrides.get("sp", base.sp))
    if sp and degrees["tp"] == 1:
        raise ValueError("sequence parallelism (sp) splits the tensor-parallel group's work; it needs tp > 1.")
    if degrees["tp"] > 1 and degrees["pp"] > 1:
        if strat.tensor == "native" or strat.pipeline == "native":
            raise ValueError(f"tp={degrees['tp']} with pp={degrees['pp']} composes the kit's own tensor-parallel "
                             f"layers and pipeline executor; {strat.name} uses PyTorch's. Run hybrid "
                             f"(`mgpukit run hybrid --tp {degrees['tp']} --pp {degrees['pp']}`).")
    if degrees["tp"] > 1 and not cfg.is_gpt:
        raise ValueError(f"tensor parallelism splits the GPT's attention heads and MLP; model "
                         f"{cfg.model!r} is not a GPT (use gpt-tiny or gpt-small).")
    if degrees["tp"] > 1:
        check_divides(cfg.model_config(), degrees["tp"], sp=sp)
    if degrees["pp"] > 1 and not strat.schedule and "pp" not in strat.composes:
        raise ValueError(f"{strat.name} cannot be combined with pipeline parallelism (pp={degrees['pp']}); "
                         f"composable with pp: dp-naive, dp-bucketed, allreduce-ring, the hand-written "
                         f"compressors, zero1, or a pipeline strategy with --dp"
                         + (f"; tensor × pipeline parallel is hybrid (`mgpukit run hybrid --tp "
                            f"{degrees['tp']} --pp {degrees['pp']}`)." if degrees["tp"] > 1 else "."))
    if degrees["dp"] > 1 and strat.schedule is None and "dp" not in strat.composes:
        raise ValueError(f"{strat.name} runs on one replica; it cannot take dp={degrees['dp']}.")
    pp = degrees["pp"]
    stage_layers = overrides.get("stage_layers")
    if stage_layers is not None:  # an uneven pipeline split, layers per stage
        if pp == 1:
            raise ValueError(f"stage_layers={stage_layers!r} splits a pipeline; it needs pp > 1.")
        try:
            parts = stage_layers.split(",") if isinstance(stage_layers, str) else stage_layers
            stage_layers = tuple(int(x) for x in parts)
        except (TypeError, ValueError):
            raise ValueError(f"stage_layers={stage_layers!r}: give the layers of each pipeline stage as "
                             f"whole numbers, e.g. (4, 4, 3, 1) or '4,4,3,1'.") from None
    if pp > 1:
        plan = plan_for(schedule, cfg, pp, degrees["dp"], overrides.get("v"), stage_layers)
        m, v = plan.m, plan.v
    else:
        if "v" in overrides and overrides["v"] != 1:
            raise ValueError(f"v={overrides['v']} (model chunks per pipeline rank) needs pp > 1.")
        m, v = cfg.micro_batches, 1
    # rows per micro-batch (whether they divide evenly is checked with the batch, in `prepare`)
    rows = max(1, cfg.global_batch // (degrees["dp"] * m))
    policies = {k: overrides[k] for k in ("checkpointing", "dtype") if k in overrides}
    knobs = strat.layout_knobs(cfg.options) if strat.layout_knobs else {}
    layout = dataclasses.replace(base, **degrees, schedule=schedule if pp > 1 else base.schedule, v=v,
                                 sp=sp, micro_batch=rows, num_micro_batches=m, stage_layers=stage_layers,
                                 **policies, **knobs)
    check_checkpointing(layout.checkpointing, cfg, strat)
    check_precision(layout.dtype)
    if layout.dtype != "fp32" and strat.worker is not None:
        raise ValueError(f"{strat.name} runs its own worker loop, outside the appliers; it cannot take "
                         f"dtype={layout.dtype!r}. Use dtype='fp32'.")
    return layout


def parallelize(model: nn.Module, cfg, ctx, rec, strat: Strategy) -> Parts:
    """This rank's `Parts` of `model` under `cfg.layout` (module docstring for the order)."""
    layout = cfg.layout
    # 1. tensor parallel
    tp = _tensor_parallel(model, cfg, ctx, rec, strat, layout) if layout.tp > 1 else None
    # 2. the policies: mixed precision (autocast per piece, fp32 master weights), then
    #    activation checkpointing (its recomputation replays the autocast state)
    apply_mixed_precision(model, layout.dtype, ctx.device.type)
    apply_checkpointing(model, layout.checkpointing)
    scaler = (LossScaler(rec, _world(ctx), init_scale=float(cfg.options.get("loss_scale_init", 2.0 ** 16)))
              if layout.dtype == "fp16" else None)
    loss = tp.loss if tp is not None else loss_fn(cfg)
    # unequal batches per dp rank: each loss weighted n·b_i/B, so the plain average is exact
    loss = weighted(loss, loss_weight(cfg, ctx.coords["dp"], ctx.size("dp")))
    loss = scaler.scaled(loss) if scaler is not None else loss
    # 3. pipeline split (of the tp-split model, when tp > 1: hybrid 3D)
    if layout.pp > 1:
        parts = _pipeline_parts(model, cfg, ctx, rec, strat, layout, loss, tp)
        parts.scaler = scaler
        return parts
    # 4. data-parallel gradient sync
    to_device(model, ctx.device)
    module, sync = _grad_sync(strat, model, cfg, ctx, rec)
    params = list(module.parameters())
    if tp is None:
        engine = LocalEngine(rec, module, sync=sync, loss_fn=loss, micro_batches=cfg.micro_batches,
                             params=params)
        return _sharded(Parts(module=module, engine=engine, sync=sync, params=params, scaler=scaler,
                              state_dict=lambda: full_state_dict(module)))
    sync = tp.wrap_sync(sync)
    engine = LocalEngine(rec, module, sync=sync, loss_fn=loss, micro_batches=cfg.micro_batches,
                         params=params, around=tp.around)
    return _sharded(Parts(module=module, engine=engine, sync=sync, params=params, holds_loss=tp.holds_loss,
                          scaler=scaler, grad_sq=lambda: tp.grad_sq(params),
                          state_dict=lambda: tp.state_dict(module)))


def _tensor_parallel(model, cfg, ctx, rec, strat: Strategy, layout: Layout):
    """Split the layers over the tp axis, ours (Megatron-style) or DTensor's."""
    if strat.tensor == "native":
        return apply_tp_native(model, ctx, rec, sp=layout.sp, count_comm=strat.option(cfg, "count_comm"))
    return apply_tp(model, ctx, rec, sp=layout.sp)


def _world(ctx):
    """The group fp16's overflow flag is agreed on: every rank (None when alone)."""
    return dist.group.WORLD if ctx.world_size > 1 and dist.is_initialized() else None


def _grad_sync(strat: Strategy, module, cfg, ctx, rec):
    if ctx.size("dp") == 1:
        return module, NoSync()
    apply = strat.grad_sync or apply_allreduce_dp
    return apply(module, ctx, rec, cfg)


def _sharded(parts: Parts) -> Parts:
    """4b. sharding over dp (ZeRO, FSDP): a sharded sync says which tensors the optimizer
    steps (this rank's shards) and what runs after its step (`strategies.sharding`)."""
    shard = getattr(parts.sync, "sharded_parts", None)
    return shard(parts) if shard is not None else parts


def _pipeline_parts(model, cfg, ctx, rec, strat: Strategy, layout: Layout, loss, tp=None) -> Parts:
    """This rank's stages; with tp, of the tp-split model: the stage passes its replicated
    (B, T, C) boundary — with sequence parallelism its own (B, T/t, C) slice — to the same tp
    rank of the next stage (`ctx.axis_ranks("pp")`), the loss is logged once per tp group, the
    gradient norm counts replicated parameters 1/t, and the weights are gathered over tp before
    the stages are merged. With sequence parallelism the dp sync is followed by the tp sum of
    the sequence-parallel region's gradients (`SequenceParallelGradSync`), as without a pipeline."""
    def grad_sync(holder):
        holder, sync = _grad_sync(strat, holder, cfg, ctx, rec)
        return holder, (tp.wrap_sync(sync) if tp is not None else sync)

    parts = apply_pipeline(ctx, rec, model, layout, loss, runtime=strat.pipeline, grad_sync=grad_sync)
    if tp is not None:
        holder, params = parts.module, parts.params
        parts = dataclasses.replace(
            parts, holds_loss=parts.holds_loss and tp.holds_loss, grad_sq=lambda: tp.grad_sq(params),
            state_dict=lambda: {k.split(".", 1)[1]: v for k, v in tp.state_dict(holder).items()})
    return _sharded(parts)
