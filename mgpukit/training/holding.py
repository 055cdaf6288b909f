"""What a rank holds of the full model — declared by the applier that cut it, read by checkpoints.

A checkpoint is written under the unsplit model's names and in its full shapes
(`training.checkpoint`), so every rank must say, for each tensor its optimizer steps, which box
of which full tensor that is. The applier that cut the model knows; it declares it on
`Parts.holding` instead of leaving the checkpoint code to guess from attributes:

    replicated   whole tensors (ddp, pipelines: this rank's stages), or DTensors (fsdp2,
                 tp-native), whose shards DCP knows itself
    tp-split     our Megatron layers (`strategies.tensor_parallel`): a split parameter is the
                 tp.rank-th of tp.size equal slices along its split dimension
    sharded      ZeRO's flat shards (`strategies.sharding`): a range of a unit's flattened
                 parameters, cut into boxes (`boxes`); `after_load` all-gathers them back

The flat-shard-to-parameter map is what DeepSpeed's universal checkpoint computes to reshard
ZeRO's partitions.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn as nn

REPLICATED, TP_SPLIT, SHARDED = "replicated", "tp-split", "sharded"


@dataclasses.dataclass
class Piece:
    """A box of the full tensor `name` (`size`) that this rank holds: `view(t)` is that box of
    `t`, a tensor shaped like the rank's parameter (the parameter itself, or optimizer state
    over it); `offsets` None: the whole tensor, as it is (replicated, or a DTensor)."""

    name: str
    size: tuple
    offsets: tuple | None = None
    view: object = None  # Callable[[Tensor], Tensor]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Holding:
    """How this rank's tensors sit in the full model (module docstring)."""

    kind: str = REPLICATED
    model: nn.Module | None = None  # whose parameter names are the full model's (default: Parts.module)
    split_dim: Callable[[torch.Tensor], int | None] | None = None  # tp-split: a parameter's cut, or None
    tp: object = None  # tp-split: the tp group (`rank`, `size`: asked of its mesh, not copied)
    units: Sequence = ()  # sharded: the flat units (`params`, `shard`, `rank`, `shard_numel`)
    after_load: Callable[[], None] | None = None  # sharded: the full parameters from the shards

    def __post_init__(self):
        if self.kind not in (REPLICATED, TP_SPLIT, SHARDED):
            raise ValueError(f"holding kind {self.kind!r}: use {REPLICATED!r}, {TP_SPLIT!r} or {SHARDED!r}.")

    def placements(self, module: nn.Module, params, *, trainer_of: str = "this strategy"
                   ) -> list[tuple[torch.Tensor, list[Piece]]]:
        """For each tensor the optimizer steps (`params`): the pieces of the full model it holds."""
        names = full_names(self.model if self.model is not None else module)
        if self.kind == SHARDED:
            return [(unit.shard, unit_pieces(unit, names)) for unit in self.units]
        out = []
        for p in params:
            if id(p) not in names:
                raise ValueError(f"checkpointing saves the parameters the model owns by name; "
                                 f"{trainer_of} trains tensors of its own.")
            dim = self.split_dim(p) if self.kind == TP_SPLIT else None
            if dim is not None:
                out.append((p, [self._tp_piece(p, names[id(p)], dim)]))
            else:  # a whole tensor, or a DTensor (DCP knows its shards)
                out.append((p, [Piece(names[id(p)], tuple(p.shape))]))
        return out

    def _tp_piece(self, p, name: str, dim: int) -> Piece:
        """Rank i of t holds the i-th of t equal slices along `dim`."""
        size = list(p.shape)
        size[dim] *= self.tp.size
        offsets = [0] * p.dim()
        offsets[dim] = self.tp.rank * p.shape[dim]
        return Piece(name, tuple(size), tuple(offsets), lambda x: x)


def full_names(module: nn.Module) -> dict[int, str]:
    """id(parameter) -> its name in the unsplit model (no DDP `module.`, no stage index)."""
    names = {}
    for name, p in module.named_parameters():
        if isinstance(module, nn.ModuleList):  # pipeline stages: "0.blocks.2..." -> "blocks.2..."
            name = name.split(".", 1)[1]
        names[id(p)] = name.removeprefix("module.")
    return names


def boxes(shape, a: int, b: int) -> list[tuple[tuple, tuple, int]]:
    """Elements [a, b) of a row-major tensor of `shape` (flattened) as boxes:
    [(offsets, sizes, first flat index)], each contiguous in memory — at most a partial row,
    a block of full rows and a partial row per dimension."""
    if a >= b:
        return []
    if len(shape) == 0:
        return [((), (), 0)]
    row = math.prod(shape[1:])
    lo, hi = -(-a // row), b // row  # the full rows [lo, hi)
    if lo > hi:  # a and b inside one row
        i = a // row
        return [((i, *o), (1, *z), i * row + f) for o, z, f in boxes(shape[1:], a - i * row, b - i * row)]
    out = []
    if a < lo * row:  # the end of row lo-1
        out += [((lo - 1, *o), (1, *z), (lo - 1) * row + f)
                for o, z, f in boxes(shape[1:], a - (lo - 1) * row, row)]
    if lo < hi:
        out.append(((lo, *[0] * (len(shape) - 1)), (hi - lo, *shape[1:]), lo * row))
    if hi * row < b:  # the start of row hi
        out += [((hi, *o), (1, *z), hi * row + f) for o, z, f in boxes(shape[1:], 0, b - hi * row)]
    return out


def unit_pieces(unit, names) -> list[Piece]:
    """This rank's flat shard of a ZeRO unit as boxes of the parameters it spans."""
    lo, hi = unit.rank * unit.shard_numel, (unit.rank + 1) * unit.shard_numel
    out, offset = [], 0
    for q in unit.params:
        a, b = max(offset, lo), min(offset + q.numel(), hi)
        for offs, sizes, f in boxes(tuple(q.shape), a - offset, b - offset):
            start = offset + f - lo  # where the box starts in the shard
            out.append(Piece(names[id(q)], tuple(q.shape), offs,
                             lambda t, s=start, z=sizes: t[s:s + math.prod(z)].view(z)))
        offset += q.numel()
    return out
