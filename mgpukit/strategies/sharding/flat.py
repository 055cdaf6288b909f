"""Flat buffers and their shards: the data structure every ZeRO stage is written on.

ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC'20, §5) partitions the model states of N data-parallel ranks so that rank r keeps
only 1/N of them. Partitioning tensor by tensor would leave ranks with unequal pieces; like
DeepSpeed and PyTorch FSDP we partition *flat buffers* instead:

    unit  = a group of parameters used together (one transformer block, the embedding, the head)
    flat  = their values laid end to end, zero-padded to a multiple of N     (padded,)
    shard = flat[r·S : (r+1)·S], S = padded / N                              (S,)

so the two collectives ZeRO is built from map one-to-one onto torch's flat ones:

    all-gather      N shards  -> the full flat buffer     (`dist.all_gather_into_tensor`)
    reduce-scatter  N full flat gradients -> my shard of their sum  (`dist.reduce_scatter_tensor`)

Units follow FSDP's wrapping: each layer of a repeated stack (an element of a `ModuleList` /
`ModuleDict`: a GPT block, an MLP layer, a pipeline stage's blocks) is a unit, and so is each
other child of the modules that hold such stacks (the GPT's `embed` and `head`). ZeRO-1/2
could use one unit for everything; ZeRO-3 needs them to gather one layer at a time.
"""
from __future__ import annotations

import torch
import torch.nn as nn

# the untimed gathers (after a checkpoint load, the full weights for parity): torch 2.13 renamed
# all_gather_into_tensor to all_gather_single, and the old name prints a FutureWarning in every
# worker of every zero run; older torch has only the old name (as `measure.recorder`)
ALL_GATHER = (getattr(torch.distributed, "all_gather_single", None)
              or torch.distributed.all_gather_into_tensor)


class FlatUnit:
    """One unit's parameters as a padded flat buffer cut into `n` equal shards."""

    def __init__(self, name: str, module: nn.Module, *, n: int, rank: int):
        self.name, self.module = name, module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.numel = sum(p.numel() for p in self.params)
        self.n, self.rank = n, rank
        self.shard_numel = -(-self.numel // n)  # ceil: the last shard carries the padding
        self.padded = self.shard_numel * n
        first = self.params[0]
        self.dtype, self.device = first.dtype, first.device
        # filled in by the ZeRO stages
        self.full: torch.Tensor | None = None  # (padded,) the full parameters (ZeRO-3: freed between uses)
        self.full_grad: torch.Tensor | None = None  # (padded,) the full gradient (ZeRO-1 keeps it)
        self.shard: nn.Parameter | None = None  # (S,) what this rank's optimizer steps
        self.ready = 0  # parameters whose gradient backward has finished (ZeRO-2/3 hooks)
        self.handle = None  # an all-gather in flight (ZeRO-3 prefetch)
        self.gathered = False  # ZeRO-3: `full` holds the parameters now

    def empty(self) -> torch.Tensor:
        return torch.empty(self.padded, dtype=self.dtype, device=self.device)  # (padded,)

    def flatten(self, tensors) -> torch.Tensor:
        """`tensors` (one per parameter) copied end to end into a new zero-padded buffer."""
        flat = torch.zeros(self.padded, dtype=self.dtype, device=self.device)
        offset = 0
        for t in tensors:
            flat[offset:offset + t.numel()].copy_(t.reshape(-1))
            offset += t.numel()
        return flat

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Views of `flat` shaped like each parameter (no copy: writing one writes the other)."""
        out, offset = [], 0
        for p in self.params:
            out.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        return out

    def my_shard(self, flat: torch.Tensor) -> torch.Tensor:
        """This rank's slice of `flat` (a view)."""
        return flat[self.rank * self.shard_numel:(self.rank + 1) * self.shard_numel]


def find_units(module: nn.Module, *, n: int, rank: int) -> list[FlatUnit]:
    """`module` cut into units in registration order, which is the GPT's execution order
    (embed, blocks, head); module docstring for the rule."""
    units: list[FlatUnit] = []

    def expand(mod: nn.Module) -> bool:  # a stack, or a module holding one
        return isinstance(mod, (nn.ModuleList, nn.ModuleDict)) or any(
            isinstance(c, (nn.ModuleList, nn.ModuleDict)) for c in mod.children())

    def visit(prefix: str, mod: nn.Module, top: bool) -> None:
        if not (top or expand(mod)):
            if any(p.requires_grad for p in mod.parameters()):
                units.append(FlatUnit(prefix, mod, n=n, rank=rank))
            return
        if any(p.requires_grad for p in mod.parameters(recurse=False)):
            raise TypeError(f"{prefix or type(mod).__name__} holds parameters next to its layers; "
                            f"the sharding units expect every parameter inside a child module.")
        for name, child in mod.named_children():
            visit(f"{prefix}.{name}" if prefix else name, child, False)

    visit("", module, True)
    return units
