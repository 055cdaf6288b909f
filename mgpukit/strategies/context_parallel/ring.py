"""Ring attention: causal attention over a sequence split across the ranks of the "cp" axis.

Liu, Zaharia & Abbeel 2023, "Ring Attention with Blockwise Transformers for Near-Infinite
Context": each rank keeps its queries and passes its key/value block around a ring; after
`cp` steps every query has met every key, and no rank ever held more than two K/V blocks.
The partial results are combined with the log-sum-exp rule of the online softmax (Milakov &
Gimelshein 2018; FlashAttention, Dao et al. 2022): a block's output `o_s` with log-sum-exp
`l_s` merges into the running `(o, l)` as

    l' = log(exp(l) + exp(l_s)),   o' = o·exp(l − l') + o_s·exp(l_s − l')

which is exactly softmax over the union of the keys — no approximation.

Load balancing (Megatron-Core's context parallelism; torchtitan's `_RoundRobinLoadBalancer`
/ "zig-zag"): the sequence is cut into `2·cp` chunks and rank `i` holds chunks `i` and
`2·cp − 1 − i`. Under a causal mask a query chunk attends only to key chunks at or before it,
so with plain contiguous slices the last rank would do `2·cp − 1` block products and the first
one; with the pairing every rank does the same number (`blocks_per_rank`).

Collectives: none. Point-to-point, through the recorder (`Recorder.exchange`, one batch per
ring step: NCCL-safe), with `S` = the bytes of one rank's K (or V) block:

    forward    cp − 1 steps, each sends K and V (one message of 2S)
    backward   cp − 1 steps, each sends K, V and the dK, dV accumulated so far (4S), then one
               last message sends the finished dK, dV home (2S)

The backward is FlashAttention's (Dao et al. 2022, Alg. 2), block by block, from the saved
final output and log-sum-exp: `P = exp(S − l)`, `dV += Pᵀ dO`, `dS = P ⊙ (dO Vᵀ − rowsum(dO ⊙ O))`,
`dQ += dS K`, `dK += dSᵀ Q` (scaled by 1/√d). The dK/dV of a block travel around the ring with
it, each rank adding its queries' share, and come home after `cp` hops.
"""
from __future__ import annotations

import dataclasses
import math

import torch


@dataclasses.dataclass(frozen=True)
class CPGroup:
    """Where ring messages go: the recorder, the cp group, this rank's place in it."""

    rec: object
    group: object
    ranks: tuple[int, ...]  # global ranks of the cp group, ring order
    rank: int  # this rank's index in the ring

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def next(self) -> int:
        return self.ranks[(self.rank + 1) % self.size]

    @property
    def prev(self) -> int:
        return self.ranks[(self.rank - 1) % self.size]

    def chunks_of(self, r: int) -> tuple[int, int]:
        """The two global chunks (of 2·cp) that ring rank `r` holds: r and 2·cp − 1 − r."""
        return r, 2 * self.size - 1 - r

    def pass_on(self, send: torch.Tensor) -> tuple[torch.Tensor, object]:
        """Post: `send` to the next rank, a buffer like it from the previous one (one batch)."""
        got = torch.empty_like(send)
        handle = self.rec.exchange(sends=[(send, self.next)], recvs=[(got, self.prev)], group=self.group,
                                   axis="cp")
        return got, handle


def blocks_per_rank(cp: int) -> list[int]:
    """Chunk-pair products each ring rank computes under the causal mask (load balance):
    rank i's query chunks {i, 2cp−1−i} against every key chunk at or before them — (i + 1) +
    (2cp − i) = 2·cp + 1 for every rank (two of them diagonal). Contiguous slices (chunks 2i,
    2i+1) would give rank i 4i + 3: the last rank four times the first's work and more."""
    out = []
    for i in range(cp):
        mine = (i, 2 * cp - 1 - i)
        out.append(sum(1 for a in mine for j in range(cp) for b in (j, 2 * cp - 1 - j) if b <= a))
    return out


def _scores(q, k, causal: bool):
    """(B, nh, c, c) scaled scores, the upper triangle masked on a diagonal chunk pair."""
    s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return s


def _merge(o, lse, o_s, lse_s):
    """The online-softmax merge of a block's (o_s, lse_s) into the running (o, lse)."""
    if o is None:
        return o_s, lse_s
    new = torch.logaddexp(lse, lse_s)
    return o * torch.exp(lse - new).unsqueeze(-1) + o_s * torch.exp(lse_s - new).unsqueeze(-1), new


def _pairs(ring: CPGroup, src: int):
    """(my query chunk index, its key chunk index, causal) for the chunk pairs to compute
    against the K/V block of ring rank `src` (local chunk 0 or 1 on either side)."""
    mine, theirs = ring.chunks_of(ring.rank), ring.chunks_of(src)
    for a, ga in enumerate(mine):
        for b, gb in enumerate(theirs):
            if gb <= ga:
                yield a, b, gb == ga


class _RingAttention(torch.autograd.Function):
    """Causal ring attention of this rank's two chunks: K/V around the ring in forward; K/V
    with their accumulating dK/dV around the ring in backward (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, ring: CPGroup):
        c = q.shape[-2] // 2  # (B, nh, 2c, hs): chunks i and 2cp-1-i
        qs = (q[..., :c, :], q[..., c:, :])
        kv = torch.stack((k, v)).contiguous()  # (2, B, nh, 2c, hs): what travels
        out, lse = [None, None], [None, None]
        for step in range(ring.size):
            src = (ring.rank - step) % ring.size
            if step < ring.size - 1:
                nxt, handle = ring.pass_on(kv)  # overlaps with this block's products
            for a, b, causal in _pairs(ring, src):
                kb, vb = kv[0, ..., b * c:(b + 1) * c, :], kv[1, ..., b * c:(b + 1) * c, :]
                s = _scores(qs[a], kb, causal)
                l_s = torch.logsumexp(s, dim=-1)  # (B, nh, c)
                o_s = torch.matmul(torch.exp(s - l_s.unsqueeze(-1)), vb)
                out[a], lse[a] = _merge(out[a], lse[a], o_s, l_s)
            if step < ring.size - 1:
                handle.wait()
                kv = nxt
        o, l = torch.cat(out, dim=-2), torch.cat(lse, dim=-1)  # (B, nh, 2c, hs), (B, nh, 2c)
        ctx.save_for_backward(q, k, v, o, l)
        ctx.ring = ring
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, l = ctx.saved_tensors
        ring = ctx.ring
        c = q.shape[-2] // 2
        scale = 1.0 / math.sqrt(q.shape[-1])
        do = do.contiguous()
        delta = (do * o).sum(-1)  # (B, nh, 2c): rowsum(dO ⊙ O)
        dq = torch.zeros_like(q)
        # what travels: K, V and the dK, dV gathered for them so far (4, B, nh, 2c, hs)
        travel = torch.cat((torch.stack((k, v)), torch.zeros((2, *k.shape), dtype=k.dtype, device=k.device)))
        travel = travel.contiguous()
        for step in range(ring.size):
            src = (ring.rank - step) % ring.size
            for a, b, causal in _pairs(ring, src):
                qa, rows = q[..., a * c:(a + 1) * c, :], slice(a * c, (a + 1) * c)
                cols = slice(b * c, (b + 1) * c)
                kb, vb = travel[0, ..., cols, :], travel[1, ..., cols, :]
                p = torch.exp(_scores(qa, kb, causal) - l[..., rows].unsqueeze(-1))  # (B, nh, c, c)
                dob = do[..., rows, :]
                travel[3, ..., cols, :] += torch.matmul(p.transpose(-2, -1), dob)  # dV
                ds = p * (torch.matmul(dob, vb.transpose(-2, -1)) - delta[..., rows].unsqueeze(-1))
                dq[..., rows, :] += torch.matmul(ds, kb) * scale
                travel[2, ..., cols, :] += torch.matmul(ds.transpose(-2, -1), qa) * scale  # dK
            if step < ring.size - 1:
                travel, handle = ring.pass_on(travel)
                handle.wait()
        if ring.size > 1:  # the finished dK, dV belong to the next rank: send them home
            home, handle = ring.pass_on(travel[2:].contiguous())
            handle.wait()
        else:
            home = travel[2:]
        return dq, home[0], home[1], None


def ring_attention(q, k, v, ring: CPGroup):
    """Causal attention of this rank's queries over the whole (ring-split) sequence.
    q, k, v: (B, nh, 2c, hs), this rank's chunks (i, 2cp−1−i) side by side."""
    return _RingAttention.apply(q, k, v, ring)
