"""Cross-entropy over a vocabulary split across the tensor-parallel ranks.

The output layer is column-parallel: rank i holds the logits of vocabulary ids [start, end)
only, `(B, T, V/t)`. Gathering the full `(B, T, V)` logits for a plain cross-entropy would put
the largest activation of a language model on every rank. Megatron-LM (Shoeybi et al. 2019,
§3, "we fuse the output of the parallel GEMM with the cross-entropy loss") never does:

    loss = log Σ_v exp(z_v) − z_target
         = log Σ_ranks Σ_{v mine} exp(z_v − M)  +  M  −  z_target

1. M = max over the ranks of the local maxima            (all-reduce MAX: B·T numbers)
2. Σ exp(z − M) and z_target (zero on ranks not owning it),
   summed over the ranks together                        (one all-reduce SUM: 2·B·T numbers)

Backward needs no communication: ∂loss/∂z_v = softmax_v − [v = target] is local to the rank
that holds z_v (its softmax was saved from step 2).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from mgpukit.strategies.tensor_parallel.comm import TPGroup


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, tp: TPGroup, start: int):
        V_local = logits.shape[-1]
        z = logits.reshape(-1, V_local)  # (N, V/t)
        t = target.reshape(-1)  # (N,)
        top = z.max(dim=-1).values.detach().clone()
        tp.all_reduce(top, op=dist.ReduceOp.MAX)
        shifted = z - top.unsqueeze(-1)  # (N, V/t), ≤ 0
        exp = shifted.exp()
        mine = (t >= start) & (t < start + V_local)
        local_t = (t - start).masked_fill(~mine, 0)
        picked = shifted.gather(1, local_t.unsqueeze(1)).squeeze(1).masked_fill(~mine, 0.0)
        both = torch.stack([exp.sum(dim=-1), picked])  # (2, N): one message for the two sums
        tp.all_reduce(both)
        sum_exp, target_logit = both[0], both[1]
        ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), local_t, mine)  # softmax
        ctx.shape = logits.shape
        return (sum_exp.log() - target_logit).mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local_t, mine = ctx.saved_tensors
        g = softmax.clone()
        # − [v = target] where this rank holds the target (adding −0.0 elsewhere changes
        # nothing); a scatter, not boolean indexing, so the shapes never depend on the data
        g.scatter_add_(1, local_t.unsqueeze(1), mine.to(g.dtype).neg().unsqueeze(1))
        g.mul_(grad / g.shape[0])
        return g.view(ctx.shape), None, None, None


def vocab_parallel_loss(tp: TPGroup, start: int):
    """`loss(logits_local (B, T, V/t), targets (B, T))` -> the mean cross-entropy, on every rank."""
    def loss(logits, targets):
        return _VocabParallelCrossEntropy.apply(logits, targets, tp, start)
    return loss
