"""The all-to-all of expert parallelism, as an autograd function.

GShard (Lepikhin et al. 2020, §2.2) shards the experts of an MoE layer over devices and moves
tokens to them with two all-to-alls — *dispatch* before the experts, *combine* after. An
all-to-all's backward is an all-to-all too: the gradient of "chunk j goes to rank j" is "chunk
j comes back from rank j", which is the same operation applied to the gradient. So per MoE
layer and micro-batch, forward runs two all-to-alls and backward two (in reverse order):

    operator         forward                               backward
    all_to_all       all-to-all (chunk j -> ep rank j)     all-to-all of the gradient

Every call goes through the recorder (`Recorder.all_to_all_single`, gloo's own all-to-all on
CPU workers: no hand-written fallback is needed), on the ep group, so it is counted and timed.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class EPGroup:
    """Where expert-parallel all-to-alls go: the recorder, this rank's ep group, its index."""

    rec: object
    group: object
    size: int
    rank: int

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        """x (size·n, …): block j of dim 0 to ep rank j; returns block i from ep rank i."""
        x = x.contiguous()
        out = torch.empty_like(x)
        self.rec.all_to_all_single(out, x, group=self.group, axis="ep")
        return out


class _AllToAll(torch.autograd.Function):
    """Dispatch or combine: all-to-all forward; the gradient all-to-all'ed back in backward."""

    @staticmethod
    def forward(ctx, x, ep: EPGroup):
        ctx.ep = ep
        return ep.all_to_all(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.ep.all_to_all(grad), None


def all_to_all(x: torch.Tensor, ep: EPGroup) -> torch.Tensor:
    return _AllToAll.apply(x, ep)
