"""Linear and embedding layers split over the tensor-parallel ranks (Shoeybi et al. 2019, §3).

Each is made *from* the unmodified model's layer by keeping this rank's slice of its weights,
so a split model starts from exactly the single-process weights. A sharded parameter carries
`tp_dim`, the dimension it was cut along, which is how the full weights are put back together
(`gather_full_state`) and how the gradient norm counts it once.

    Y = X A,  A = [A_1 … A_t]  (columns)   ColumnParallelLinear: rank i computes X A_i
    Y = X A,  A = [A_1; …; A_t] (rows)     RowParallelLinear:    rank i computes X_i A_i,
                                            a partial sum; Σ_i over the ranks is Y (then + b)

A column-parallel linear followed by a row-parallel one needs no communication in between:
the MLP's GELU and attention's per-head softmax are elementwise along the split dimension.
(nn.Linear stores A transposed, `weight = Aᵀ`: columns of A are rows of `weight`.)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from mgpukit.strategies.tensor_parallel.comm import TPGroup, reduce_from_tp, scatter_seq


def _shard(param: torch.Tensor, dim: int, tp: TPGroup) -> nn.Parameter:
    size = param.shape[dim]
    if size % tp.size:
        raise ValueError(f"a dimension of {size} does not split over tp={tp.size} ranks; "
                         f"choose tp dividing {size}.")
    n = size // tp.size
    piece = nn.Parameter(param.detach().narrow(dim, tp.rank * n, n).clone())
    piece.tp_dim = dim
    return piece


class ColumnParallelLinear(nn.Module):
    """This rank's output features of `linear` (whole attention heads, a slice of the MLP's
    hidden units). Input: replicated (the caller puts `f` or the sequence all-gather before
    it, once for all the linears that share the input); output: split along features."""

    def __init__(self, linear: nn.Linear, tp: TPGroup):
        super().__init__()
        self.weight = _shard(linear.weight, 0, tp)  # (out/t, in)
        self.bias = _shard(linear.bias, 0, tp) if linear.bias is not None else None
        self.in_features, self.out_features = linear.in_features, self.weight.shape[0]

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)  # (…, out/t)


class RowParallelLinear(nn.Module):
    """This rank's input features of `linear`; the partial products are summed over the
    ranks (`g`: all-reduce, or a reduce-scatter along the sequence with sequence parallelism),
    then the replicated bias is added once."""

    def __init__(self, linear: nn.Linear, tp: TPGroup, *, sequence_parallel: bool = False):
        super().__init__()
        self.tp, self.sp = tp, sequence_parallel
        self.weight = _shard(linear.weight, 1, tp)  # (out, in/t)
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        self.in_features, self.out_features = self.weight.shape[1], linear.out_features

    def forward(self, x):
        partial = F.linear(x, self.weight)  # (B, T, out): this rank's share of the sum
        y = scatter_seq(partial, self.tp) if self.sp else reduce_from_tp(partial, self.tp)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """This rank's rows of the token table (vocabulary ids [start, end)). A token outside the
    range looks up zeros here; summing the ranks' outputs (`g`) gives every token its row."""

    def __init__(self, embedding: nn.Embedding, tp: TPGroup):
        super().__init__()
        self.weight = _shard(embedding.weight, 0, tp)  # (V/t, C)
        self.num_embeddings = embedding.num_embeddings
        self.start = tp.rank * self.weight.shape[0]
        self.end = self.start + self.weight.shape[0]

    def forward(self, idx):
        outside = (idx < self.start) | (idx >= self.end)
        local = (idx - self.start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight)  # (B, T, C)
        return out.masked_fill(outside.unsqueeze(-1), 0.0)  # partial: only my rows
