"""`apply_cp`: context parallelism applied to the unmodified GPT from outside.

On a cp group of `n` ranks, every rank reads the same sequences (`ParallelDims.batch_coords`)
and keeps `2` of their `2n` chunks — rank i chunks i and 2n−1−i (`ring.py`: the causal mask's
load balance). Everything but attention is per token, so it runs unchanged on the rank's own
`T/n` tokens; attention becomes ring attention:

    idx (B, T) ─ my chunks ─ embed (global positions) ─ blocks [attention: ring] ─ head ─ loss
                                                                             (my tokens' mean)

Each rank's loss is the mean over its own tokens; every rank holds the same number, so the
mean over the cp ranks is the sequence's mean — and the data-parallel sync already averages
the gradients over them (cp is cut inside the dp axis, as torchtitan reduces over
`dp_shard_cp`). No weight is split: the parameters are replicated, as in data parallelism.

PyTorch's own `torch.distributed.tensor.experimental.context_parallel` (torchtitan's) does not
run beside it on CPU workers: under it, SDPA on CPU tensors fails with "Operator
aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy
registered" (torch 2.13.0+cpu, gloo, 2 ranks; checked) — its ring covers the CUDA kernels only.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from mgpukit.models.gpt import lm_loss
from mgpukit.strategies.context_parallel.ring import CPGroup, ring_attention
from mgpukit.training.parts import Split


def positions(ring: CPGroup, seq_len: int, device=None) -> torch.Tensor:
    """Global token positions this rank holds: its two chunks of `seq_len / (2·cp)`, in order."""
    c = seq_len // (2 * ring.size)
    a, b = ring.chunks_of(ring.rank)
    return torch.cat((torch.arange(a * c, (a + 1) * c, device=device),
                      torch.arange(b * c, (b + 1) * c, device=device)))


class _Embedding(nn.Module):
    """Token + position embedding of this rank's tokens only; parameter names unchanged."""

    def __init__(self, embed: nn.Module, ring: CPGroup):
        super().__init__()
        self.tok, self.pos, self.drop = embed.tok, embed.pos, embed.drop
        self.ring = ring

    def forward(self, idx):  # idx (B, T): the whole sequences, as every cp rank reads them
        pos = positions(self.ring, idx.shape[1], idx.device)
        return self.drop(self.tok(idx[:, pos]) + self.pos(pos))  # (B, T/cp, C)


class RingCore(nn.Module):
    """The attention core (`models.gpt.AttentionCore`'s place) as ring attention."""

    def __init__(self, ring: CPGroup):
        super().__init__()
        self.ring = ring

    def forward(self, q, k, v):  # (B, nh, T/cp, hs)
        return ring_attention(q, k, v, self.ring)


def check_cp(mcfg, cp: int) -> None:
    """The sequence splits into 2·cp equal chunks, and attention has no dropout to replay."""
    if mcfg.seq_len % (2 * cp):
        good = [d for d in range(1, mcfg.seq_len // 2 + 1) if mcfg.seq_len % (2 * d) == 0]
        raise ValueError(f"cp={cp} splits each sequence into 2·cp = {2 * cp} chunks, but seq_len="
                         f"{mcfg.seq_len} does not divide; choose cp in {good}.")
    if mcfg.dropout:
        raise ValueError(f"cp runs attention without dropout; the model has dropout={mcfg.dropout}.")


def apply_cp(model: nn.Module, ctx, rec, cfg=None) -> Split:
    """Rewrite `model` (a `GPT`) in place for this rank's cp group (module docstring)."""
    ring = CPGroup(rec=rec, group=ctx.group("cp"), ranks=tuple(ctx.axis_ranks("cp")), rank=ctx.coords["cp"])
    check_cp(model.cfg, ring.size)
    model.embed = _Embedding(model.embed, ring)
    for block in model.blocks:
        block.attn.core = RingCore(ring)
    seq_len = model.cfg.seq_len

    def loss(logits, targets):  # logits (B, T/cp, V) of my tokens; targets (B, T)
        return lm_loss(logits, targets[:, positions(ring, seq_len, targets.device)])

    return Split(loss=loss)
