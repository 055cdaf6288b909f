"""Apply a run's parallel layout to an unmodified model, in one documented order.

    tensor parallel (tp)  ->  activation checkpointing  ->  pipeline split (pp)
        ->  data-parallel gradient sync (dp), or sharding over dp (ZeRO / FSDP)
    [mixed precision: a policy applied with checkpointing, `strategies.policies.precision`]

the order torchtitan's `parallelize_*` uses: TP rewrites the layers themselves, checkpointing
wraps whole blocks, the pipeline cuts the (wrapped) blocks into stages, and data parallelism
synchronises the gradients of whatever this rank holds. Each step is an applier on its own
mesh axis (`ctx.group("tp" | "pp" | "dp")`); the model knows nothing of any of them.

It only applies: the layout was resolved and checked before launch (`mgpukit.prepare`), and
every worker's context carries it (`ctx.layout`; the degrees are the mesh's, `ctx.size(axis)`).
"""
from __future__ import annotations

import dataclasses

import torch.distributed as dist
import torch.nn as nn

from mgpukit.costmodel.layout import Layout
from mgpukit.models.weights import full_state_dict, to_device
from mgpukit.strategies.data_parallel.naive import apply_allreduce_dp
from mgpukit.strategies.pipeline.engine import apply_pipeline
from mgpukit.strategies.policies.checkpointing import apply_checkpointing
from mgpukit.strategies.policies.precision import LossScaler, apply_mixed_precision
from mgpukit.strategies.registry import Strategy
from mgpukit.strategies.tensor_parallel.apply import apply_tp
from mgpukit.strategies.tensor_parallel.native import apply_tp_native
from mgpukit.training.building import loss_fn
from mgpukit.training.batch_split import loss_weight, weighted
from mgpukit.training.local import LocalEngine
from mgpukit.training.parts import NoSync, Parts

def parallelize(model: nn.Module, cfg, ctx, rec, strat: Strategy) -> Parts:
    """This rank's `Parts` of `model` under `ctx.layout` (module docstring for the order); the
    degrees are the mesh's (`ctx.size`), the rest of the layout is `ctx.layout`'s."""
    layout = ctx.layout
    if layout is None:
        raise ValueError("parallelize applies the run's resolved layout, which the worker context "
                         "carries: launch with layout=prepared.layout (`mgpukit.prepare`).")
    # 1. tensor parallel
    tp = _tensor_parallel(model, cfg, ctx, rec, strat, layout) if ctx.size("tp") > 1 else None
    # 1b. context / expert parallel: the sequence or the experts split inside the dp axis
    split = strat.split(model, ctx, rec, cfg) if strat.split is not None else None
    # 2. the policies: mixed precision (autocast per piece, fp32 master weights), then
    #    activation checkpointing (its recomputation replays the autocast state)
    apply_mixed_precision(model, layout.dtype, ctx.device.type)
    apply_checkpointing(model, layout.checkpointing)
    scaler = (LossScaler(rec, _world(ctx), init_scale=float(cfg.options.get("loss_scale_init", 2.0 ** 16)))
              if layout.dtype == "fp16" else None)
    loss = tp.loss if tp is not None else split.loss if split is not None else loss_fn(cfg)
    # unequal batches per dp rank: each loss weighted n·b_i/B, so the plain average is exact
    loss = weighted(loss, loss_weight(cfg, ctx.coords["dp"], ctx.size("dp")))
    loss = scaler.scaled(loss) if scaler is not None else loss
    # 3. pipeline split (of the tp-split model, when tp > 1: hybrid 3D)
    if ctx.size("pp") > 1:
        parts = _pipeline_parts(model, cfg, ctx, rec, strat, layout, loss, tp)
        parts.scaler = scaler
        return parts
    # 4. data-parallel gradient sync
    to_device(model, ctx.device)
    module, sync = _grad_sync(strat, model, cfg, ctx, rec)
    params = list(module.parameters())
    if tp is None:
        engine = LocalEngine(rec, module, sync=sync, loss_fn=loss, micro_batches=layout.num_micro_batches,
                             params=params)
        if split is not None:
            return _sharded(Parts(
                module=module, engine=engine, sync=sync, params=params, scaler=scaler, extra=split.extra,
                loss_of=_loss_of(module, loss),
                state_dict=lambda: (split.state_dict or full_state_dict)(module),
                grad_sq=(lambda: split.grad_sq(params)) if split.grad_sq is not None else None))
        return _sharded(Parts(module=module, engine=engine, sync=sync, params=params, scaler=scaler,
                              state_dict=lambda: full_state_dict(module), loss_of=_loss_of(module, loss)))
    sync = tp.wrap_sync(sync)
    engine = LocalEngine(rec, module, sync=sync, loss_fn=loss, micro_batches=layout.num_micro_batches,
                         params=params, around=tp.around)
    return _sharded(Parts(module=module, engine=engine, sync=sync, params=params, holds_loss=tp.holds_loss,
                          scaler=scaler, grad_sq=lambda: tp.grad_sq(params),
                          state_dict=lambda: tp.state_dict(module), holding=tp.holding,
                          loss_of=_loss_of(module, loss) if tp.around is None else None))  # else loss_parallel


def _loss_of(module, loss):
    """`Parts.loss_of`: one micro-batch's forward and loss, as `LocalEngine` runs them."""
    return lambda x, y: loss(module(x), y)


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
    return parts.sync.sharded_parts(parts) if parts.sync.sharded_parts is not None else parts


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
            state_dict=lambda: {k.split(".", 1)[1]: v for k, v in tp.state_dict(holder).items()},
            holding=tp.holding)
    return _sharded(parts)
