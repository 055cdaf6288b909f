"""The four communication operators of tensor parallelism, as autograd functions.

Megatron-LM (Shoeybi et al. 2019, §3, Fig. 3) needs only two conjugate operators to split a
transformer block over `t` ranks, and sequence parallelism (Korthikanti et al. 2022, §4.2.2,
Fig. 5) replaces each by a conjugate pair that moves the same bytes:

    operator           forward                         backward
    f  copy_to_tp      identity                        all-reduce (sum) the input gradient
    g  reduce_from_tp  all-reduce (sum) partial sums   identity
    ḡ  gather_seq      all-gather along the sequence   reduce-scatter along the sequence
    f̄  scatter_seq     reduce-scatter along sequence   all-gather along the sequence

`f` sits where a replicated activation enters column-parallel linears (each rank's linear
produces only part of the input's gradient, so backward sums them); `g` sits where
row-parallel linears leave partial sums. With sequence parallelism the activations between
blocks are split along the sequence, so `f` becomes an all-gather (and its backward a
reduce-scatter) and `g` a reduce-scatter (its backward an all-gather): a ring all-reduce *is*
a reduce-scatter followed by an all-gather, so the bytes are the same, but LayerNorm and
dropout now work on 1/t of the tokens.

Every collective goes through the recorder (`rec.all_reduce` …) on the tensor-parallel group,
so it is counted and timed — measured, or on the virtual clock when emulated. Activations are
`(B, T, C)`; the sequence operators gather and scatter dim 1 (through a `(T, B, C)` copy,
because the backend's tensor collectives concatenate along dim 0).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class TPGroup:
    """Where tensor-parallel collectives go: the recorder and the worker's context, whose mesh
    (built from the run's layout) holds this rank's tp group. The degree and this rank's index
    are asked of the context each time, not copied here: the tp degree lives in the layout and
    the mesh, nowhere else in a worker."""

    rec: object
    ctx: object  # the `runtime.context.WorkerContext`

    @property
    def group(self):
        """This rank's tp process group (None in a single process: no collective is called)."""
        return self.ctx.group("tp")

    @property
    def size(self) -> int:
        """The tp degree, t."""
        return self.ctx.size("tp")

    @property
    def rank(self) -> int:
        """This rank's index in its tp group, 0 … t - 1."""
        return self.ctx.coords["tp"]

    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        self.rec.all_reduce(t, op=op, group=self.group)
        return t

    def gather_seq(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T/t, C) on each rank -> (B, T, C) on every rank."""
        shard = x.transpose(0, 1).contiguous()  # (T/t, B, C)
        out = torch.empty((shard.shape[0] * self.size, *shard.shape[1:]), dtype=x.dtype, device=x.device)
        self.rec.all_gather(out, shard, group=self.group)
        # contiguous once here: q, k and v (or fc1) would each copy a strided input — and
        # save their copy for backward, three full activations instead of one
        return out.transpose(0, 1).contiguous()  # (B, T, C)

    def scatter_seq(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) partial sums on each rank -> (B, T/t, C): the sum, this rank's tokens."""
        full = x.transpose(0, 1).contiguous()  # (T, B, C)
        if full.shape[0] % self.size:
            raise ValueError(f"sequence of {full.shape[0]} tokens does not split over tp={self.size} ranks; "
                             f"use a sequence length divisible by {self.size}.")
        out = torch.empty((full.shape[0] // self.size, *full.shape[1:]), dtype=x.dtype, device=x.device)
        self.rec.reduce_scatter(out, full, group=self.group)
        return out.transpose(0, 1).contiguous()  # (B, T/t, C)

    def split_seq(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's tokens of a replicated (B, T, C): a slice, no communication."""
        T = x.shape[1]
        if T % self.size:
            raise ValueError(f"sequence of {T} tokens does not split over tp={self.size} ranks; "
                             f"use a sequence length divisible by {self.size}.")
        n = T // self.size
        return x[:, self.rank * n:(self.rank + 1) * n]


class _CopyToTP(torch.autograd.Function):
    """f: identity forward; backward all-reduces the gradient of the replicated input."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_reduce(grad.contiguous().clone()), None


class _ReduceFromTP(torch.autograd.Function):
    """g: forward sums the row-parallel partial outputs over the tp ranks; backward identity."""

    @staticmethod
    def forward(ctx, x, tp):
        return tp.all_reduce(x.contiguous().clone())

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherSeq(torch.autograd.Function):
    """ḡ: all-gather along the sequence; backward reduce-scatters the gradient."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.gather_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.scatter_seq(grad), None


class _ScatterSeq(torch.autograd.Function):
    """f̄: reduce-scatter along the sequence; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.scatter_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.gather_seq(grad), None


class _SplitSeq(torch.autograd.Function):
    """A replicated activation cut to this rank's tokens; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.split_seq(x).contiguous()

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.gather_seq(grad.contiguous()), None


def copy_to_tp(x, tp: TPGroup):
    return _CopyToTP.apply(x, tp)


def reduce_from_tp(x, tp: TPGroup):
    return _ReduceFromTP.apply(x, tp)


def gather_seq(x, tp: TPGroup):
    return _GatherSeq.apply(x, tp)


def scatter_seq(x, tp: TPGroup):
    return _ScatterSeq.apply(x, tp)


def split_seq(x, tp: TPGroup):
    return _SplitSeq.apply(x, tp)
