"""`zero1`: ZeRO stage 1 — the optimizer states are sharded over the data-parallel ranks.

Rajbhandari et al. 2020 ("ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC'20, §5.1, "P_os"). Plain data parallelism keeps N identical copies of everything.
Adam's momentum and variance (8 bytes per parameter in fp32, 12 with the fp32 master copy of
mixed precision) are the largest part, and each rank only needs the states of the parameters
it updates. So rank r updates only its shard — 1/N of every flat buffer (`flat.py`) — and
keeps optimizer states for that shard alone:

    backward           full gradient on every rank (as in DDP)                    4Ψ
    reduce-scatter     gradient -> my shard of its sum; divide by N                (n-1)/n·Ψ sent
    optimizer step     on my shard only: states for Ψ/N parameters                 8Ψ/N (Adam)
    all-gather         updated shards -> the full parameters on every rank         (n-1)/n·Ψ sent

Reduce-scatter + all-gather move exactly what one ring all-reduce moves (an all-reduce *is* a
reduce-scatter followed by an all-gather), so ZeRO-1 costs no more communication than DDP
(§7.2.1) while the optimizer states shrink N-fold: per rank ``4Ψ + 4Ψ + 8Ψ/N`` (fp32 Adam).

How it fits the one trainer: the optimizer is built over this rank's shards (`Parts.params`,
one `nn.Parameter` per unit, each a *view* into the unit's full flat parameter buffer, so
stepping the shard updates the model in place); `sync()` reduce-scatters after backward;
`after_step` all-gathers. The model's parameters and gradients are views into the flat
buffers, so nothing is copied between the model and the buffers.

Collectives: none in forward; after backward one reduce-scatter per unit; after the optimizer
step one all-gather per unit — all over the dp group. Gradient accumulation: micro-steps only
accumulate into the full gradient (the reduce-scatter runs once per step).
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn as nn

from mgpukit.strategies.registry import register
from mgpukit.strategies.sharding.flat import ALL_GATHER, FlatUnit, find_units
from mgpukit.strategies.sharding.theory import zero_layout, zero_theory
from mgpukit.training.holding import SHARDED, Holding


class ShardedModule(nn.Module):
    """What memory accounting sees: the model (whose full parameters ZeRO-3 frees) and this
    rank's shards, storages counted once (`measure.memory.tensor_bytes`)."""

    def __init__(self, model: nn.Module, shards: list[nn.Parameter]):
        super().__init__()
        self.model = model
        self.shards = nn.ParameterList(shards)


class Zero1:
    """ZeRO-1 over `group` (module docstring); `Zero2` and `Zero3` extend it stage by stage."""

    stage = 1

    def __init__(self, module: nn.Module, rec, *, group, rank: int, n: int):
        self.module, self.rec, self.group, self.n = module, rec, group, n
        self.units: list[FlatUnit] = find_units(module, n=n, rank=rank)
        self.meter = None  # the engine's ActivationMeter, once `sharded_parts` knows it
        for unit in self.units:
            self.lay_out_params(unit)
            self.lay_out_grads(unit)

    # ---- layout -------------------------------------------------------------------------
    def lay_out_params(self, unit: FlatUnit) -> None:
        """The unit's parameters become views into one flat buffer; my shard is a slice of it."""
        unit.full = unit.flatten([p.detach() for p in unit.params])  # (padded,)
        for p, view in zip(unit.params, unit.views(unit.full)):
            p.data = view
        unit.shard = nn.Parameter(unit.my_shard(unit.full))  # (S,), a view: shares the storage

    def lay_out_grads(self, unit: FlatUnit) -> None:
        """Stage 1 keeps the full gradient (a flat buffer the parameters' .grad are views of);
        the shard's gradient is my slice of it."""
        unit.full_grad = torch.zeros_like(unit.full)  # (padded,)
        for p, view in zip(unit.params, unit.views(unit.full_grad)):
            p.grad = view
        unit.shard.grad = unit.my_shard(unit.full_grad)  # (S,)

    @property
    def shards(self) -> list[nn.Parameter]:
        return [unit.shard for unit in self.units]

    # ---- the trainer's seams -------------------------------------------------------------
    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)

    def no_sync(self):
        return contextlib.nullcontext()  # backward never communicates by itself

    def sync(self, step: int) -> None:
        """After backward: my shard of the mean gradient, by one reduce-scatter per unit."""
        for unit in self.units:
            self._as_views(unit)
            mine = torch.empty(unit.shard_numel, dtype=unit.dtype, device=unit.device)  # (S,)
            self.rec.reduce_scatter(mine, unit.full_grad, group=self.group)
            unit.shard.grad.copy_(mine).div_(self.n)

    def after_step(self, step: int) -> None:
        """After the optimizer stepped my shards: every rank gets every updated shard back."""
        for unit in self.units:
            # the input is a copy: gloo does not promise an all-gather whose input aliases its output
            self.rec.all_gather(unit.full, unit.shard.detach().clone(), group=self.group)
            unit.full_grad.zero_()  # the optimizer zeroed only my slice

    def after_load(self) -> None:
        """After a checkpoint was loaded into my shards (`training.checkpoint`, untimed):
        every rank gets every shard back into the full parameters."""
        for unit in self.units:
            ALL_GATHER(unit.full, unit.shard.detach().clone(), group=self.group)

    def sharded_parts(self, parts):
        """The trainer's `Parts` with the optimizer over my shards (see `parallelize`)."""
        self.meter = parts.engine.meter  # `Engine.meter` (None: not metered)
        return dataclasses.replace(parts, params=self.shards, after_step=self.after_step,
                                   grads_sharded=True, state_dict=self.state_dict_of(parts.state_dict),
                                   module=ShardedModule(parts.module, self.shards),
                                   holding=Holding(kind=SHARDED, model=parts.module, units=self.units,
                                                   after_load=self.after_load))

    def state_dict_of(self, state_dict):
        """The full weights, with the unsplit model's names: after `after_step` the model's
        parameters already are the full, updated weights."""
        return state_dict

    def _as_views(self, unit: FlatUnit) -> None:
        """Keep every .grad a view into the flat gradient (a pipeline schedule may have
        replaced one with a fresh tensor: copy it in)."""
        for p, view in zip(unit.params, unit.views(unit.full_grad)):
            if p.grad is None:
                view.zero_()
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
            p.grad = view


def apply_zero(cls, module, ctx, rec, cfg, **options):
    """`cls` (a ZeRO stage) over the dp group of `ctx`: the registry's appliers call this."""
    return module, cls(module, rec, group=ctx.group("dp"), rank=ctx.coords["dp"], n=ctx.size("dp"),
                       **options)


def apply_zero1(module, ctx, rec, cfg):
    return apply_zero(Zero1, module, ctx, rec, cfg)


register("zero1", family="sharding",
         description="ZeRO-1: optimizer states sharded; reduce-scatter grads, all-gather params",
         layout=zero_layout(1), grad_sync=apply_zero1, composes=("dp", "pp"), theory=zero_theory(1))
