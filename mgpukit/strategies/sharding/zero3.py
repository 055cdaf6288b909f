"""`zero3`: ZeRO stage 3 — optimizer states, gradients *and parameters* sharded over dp.

Rajbhandari et al. 2020, §5.3 ("P_os+g+p"). After ZeRO-2 every rank still holds all the
parameters, although between two uses of a layer nobody needs them. Stage 3 keeps only this
rank's shard of each unit (one transformer block, the embedding, the head) and rebuilds the
full unit just before it runs, then frees it again:

    forward,  unit i    all-gather unit i (prefetched), run it, free it;  prefetch unit i+1
    backward, unit i    all-gather unit i again (prefetched), backward, reduce-scatter its
                        gradient into my shard, free params and gradient; prefetch unit i-1
    optimizer step      on my shards; nothing to gather afterwards

Per rank ``(4 + 4 + 8)Ψ/N`` (fp32 Adam) plus the full units in flight — the current one and
the prefetched next, the cost model's ``gather_bytes`` — and each step sends ``3(n-1)/n·Ψ``:
two all-gathers and a reduce-scatter, 1.5× DDP's all-reduce (§7.2.2).

Mechanics. Each unit's full parameters are views into one flat buffer (`flat.py`), created
once; "free" shrinks that buffer's *storage* to zero bytes and "gather" grows it back and
all-gathers into it (PyTorch FSDP's trick). Every view — the parameters, and the transposed
weights autograd saved for backward — sees the gathered values again, and nothing is copied.
Module hooks do the work: a forward pre-hook gathers (and prefetches the next unit), a forward
hook frees and puts a hook on the unit's output whose gradient, when backward reaches it,
gathers the unit again; the unit's last post-accumulate-grad hook reduce-scatters (ZeRO-2's
`reduce`) and frees. Units are visited in registration order, the GPT's execution order.

Collectives: per unit and micro-batch, an all-gather in forward, an all-gather and a
reduce-scatter in backward — over the dp group. Knob `prefetch_next` (default true): launch
the next unit's all-gather while the current one computes.
"""
from __future__ import annotations

import torch

from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.registry import register
from mgpukit.strategies.sharding.flat import ALL_GATHER, FlatUnit
from mgpukit.strategies.sharding.theory import zero_layout, zero_theory
from mgpukit.strategies.sharding.zero1 import apply_zero
from mgpukit.strategies.sharding.zero2 import Zero2


class Zero3(Zero2):
    """ZeRO-3 over `group` (module docstring)."""

    stage = 3

    def __init__(self, module, rec, *, group, rank: int, n: int, prefetch_next: bool = True):
        self.prefetch_next = prefetch_next
        super().__init__(module, rec, group=group, rank=rank, n=n)
        for i, unit in enumerate(self.units):
            unit.module.register_forward_pre_hook(self._before_forward(i))
            unit.module.register_forward_hook(self._after_forward(i))

    # ---- layout: my shard owns its storage; the full buffer is freed ------------------------
    def lay_out_params(self, unit: FlatUnit) -> None:
        super().lay_out_params(unit)  # parameters = views into unit.full; shard = my slice
        unit.shard = torch.nn.Parameter(unit.shard.detach().clone())  # (S,) its own storage now
        unit.gathered = True
        self.free(unit)

    # ---- the two primitives -----------------------------------------------------------------
    def gather(self, unit: FlatUnit, *, async_op: bool = False) -> None:
        """Rebuild the unit's full parameters from every rank's shard (all-gather into the
        unit's flat buffer, which the parameters are views of)."""
        if not unit.gathered:
            unit.full.untyped_storage().resize_(unit.padded * unit.full.element_size())
            if self.meter is not None:  # weights, not activations, when autograd saves them
                self.meter.skip(unit.full)
            unit.handle = self.rec.all_gather(unit.full, unit.shard.detach(), group=self.group,
                                              async_op=async_op)
            unit.gathered = True
        if not async_op and unit.handle is not None:  # a prefetch in flight: wait for it
            unit.handle.wait()
            unit.handle = None

    def free(self, unit: FlatUnit) -> None:
        """Drop the unit's full parameters: the flat buffer's storage shrinks to 0 bytes."""
        if unit.gathered:
            if self.meter is not None:
                self.meter.skip(unit.full, False)
            unit.full.untyped_storage().resize_(0)
            unit.gathered = False

    def _prefetch(self, i: int) -> None:
        if self.prefetch_next and 0 <= i < len(self.units):
            self.gather(self.units[i], async_op=True)

    # ---- hooks ----------------------------------------------------------------------------
    def _before_forward(self, i: int):
        def hook(module, args):
            self.gather(self.units[i])
            self._prefetch(i + 1)
        return hook

    def _after_forward(self, i: int):
        def hook(module, args, output):
            self.free(self.units[i])
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(self._before_backward(i))
        return hook

    def _before_backward(self, i: int):
        def hook(grad):
            self.gather(self.units[i])
            self._prefetch(i - 1)
        return hook

    def reduce(self, unit: FlatUnit) -> None:
        """ZeRO-2's reduce-scatter of the unit's gradient, then its parameters are freed."""
        super().reduce(unit)
        self.free(unit)

    def after_step(self, step: int) -> None:
        pass  # the shards *are* the parameters now; the next forward gathers them

    def after_load(self) -> None:
        pass  # a checkpoint loads into the shards; the next forward gathers them

    # ---- weights for parity / checkpoints ----------------------------------------------------
    def state_dict_of(self, state_dict):
        """The full weights: gather every unit (bookkeeping, untimed), read them, free again."""
        def full_state_dict():
            with self.rec.untimed():
                for unit in self.units:
                    unit.full.untyped_storage().resize_(unit.padded * unit.full.element_size())
                    ALL_GATHER(unit.full, unit.shard.detach(), group=self.group)
                    unit.gathered = True
                out = state_dict()
                for unit in self.units:
                    self.free(unit)
            return out
        return full_state_dict


def apply_zero3(module, ctx, rec, cfg):
    """The registry's applier: `Zero3` over the dp group, with the `prefetch_next` knob."""
    return apply_zero(Zero3, module, ctx, rec, cfg, prefetch_next=STRATEGY.option(cfg, "prefetch_next"))


STRATEGY = register(
    "zero3", family="sharding",
    description="ZeRO-3: + parameters sharded; each block all-gathered before use, freed after",
    layout=zero_layout(3), grad_sync=apply_zero3, theory=zero_theory(3),
    knobs=(Knob("prefetch_next", bool, True, "all-gather the next block while this one computes"),))
