"""`zero2`: ZeRO stage 2 — optimizer states *and gradients* sharded over the dp ranks.

Rajbhandari et al. 2020, §5.2 ("P_os+g"). Under ZeRO-1 every rank still holds the full
gradient, although it only ever uses its own shard of it. Stage 2 reduces each unit's
gradient as soon as backward has produced it — the last parameter of a unit (one transformer
block) firing its post-accumulate-grad hook launches an asynchronous reduce-scatter into this
rank's shard of the gradient — and frees the unit's full gradient once that has finished:

    backward, unit by unit   full grad of one unit -> reduce-scatter -> my shard (+=)  4Ψ/N kept
                             (at most two units' full gradients alive at once)
    optimizer step           on my shard, states for Ψ/N parameters                     8Ψ/N (Adam)
    all-gather               updated shards -> full parameters (as ZeRO-1)              4Ψ

Same bytes sent as ZeRO-1 and DDP (§7.2.1), and per rank ``4Ψ + (4 + 8)Ψ/N`` (fp32 Adam). The
reduce-scatters overlap the rest of backward, as DDP's bucketed all-reduces do
(`data_parallel/bucketed.py`).

Gradient accumulation: keeping gradients sharded means reducing after *every* micro-batch and
adding into the shard (the cost model's ``m`` reduce-scatters per step), so `no_sync()` does
not silence the hooks here — the memory saving is the point of the stage.

Collectives: none in forward; one async reduce-scatter per unit per micro-batch during
backward; one all-gather per unit after the optimizer step — over the dp group.
"""
from __future__ import annotations

import collections

import torch

from mgpukit.strategies.registry import register
from mgpukit.strategies.sharding.flat import FlatUnit
from mgpukit.strategies.sharding.theory import zero_layout, zero_theory
from mgpukit.strategies.sharding.zero1 import Zero1, apply_zero

IN_FLIGHT = 2  # units whose full gradient may still be alive while their reduce-scatter runs


class Zero2(Zero1):
    """ZeRO-2 over `group` (module docstring)."""

    stage = 2

    def __init__(self, module, rec, *, group, rank: int, n: int):
        self._in_flight = collections.deque()  # (unit, handle, my reduced slice, full gradient)
        super().__init__(module, rec, group=group, rank=rank, n=n)

    def lay_out_grads(self, unit: FlatUnit) -> None:
        """Only my shard of the gradient persists; the parameters' .grad live one backward."""
        unit.shard.grad = torch.zeros(unit.shard_numel, dtype=unit.dtype, device=unit.device)  # (S,)
        for p in unit.params:
            p.register_post_accumulate_grad_hook(self._grad_ready(unit))

    def _grad_ready(self, unit: FlatUnit):
        def hook(param):
            unit.ready += 1
            if unit.ready == len(unit.params):  # the unit's backward is done
                self.reduce(unit)
        return hook

    def reduce(self, unit: FlatUnit) -> None:
        """Launch the reduce-scatter of the unit's gradient; its full gradient is dropped from
        the parameters now and freed when the collective has finished (`_finish`)."""
        unit.ready = 0
        full = unit.flatten([p.grad if p.grad is not None else torch.zeros_like(p) for p in unit.params])
        for p in unit.params:
            p.grad = None
        mine = torch.empty(unit.shard_numel, dtype=unit.dtype, device=unit.device)  # (S,)
        handle = self.rec.reduce_scatter(mine, full, group=self.group, async_op=True)
        self._in_flight.append((unit, handle, mine, full))
        while len(self._in_flight) > IN_FLIGHT:
            self._finish()

    def _finish(self) -> None:
        unit, handle, mine, _full = self._in_flight.popleft()
        handle.wait()
        unit.shard.grad.add_(mine)  # sums over the micro-batches; `sync` divides by N once

    def sync(self, step: int) -> None:
        """After backward: finish every reduce-scatter in flight, then the mean (÷ N)."""
        for unit in self.units:
            if unit.ready:  # some parameter got no gradient: reduce what there is (zeros)
                self.reduce(unit)
        while self._in_flight:
            self._finish()
        for unit in self.units:
            unit.shard.grad.div_(self.n)

    def after_step(self, step: int) -> None:
        for unit in self.units:
            self.rec.all_gather(unit.full, unit.shard.detach().clone(), group=self.group)


def apply_zero2(module, ctx, rec, cfg):
    return apply_zero(Zero2, module, ctx, rec, cfg)


register("zero2", family="sharding",
         description="ZeRO-2: + gradients sharded; reduce-scatter each block's grads during backward",
         layout=zero_layout(2), grad_sync=apply_zero2, theory=zero_theory(2))
