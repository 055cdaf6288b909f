"""Ring attention against plain causal attention, on random tensors, inside a launch.

Every rank builds the same full q, k, v (seeded), runs `F.scaled_dot_product_attention` on the
whole sequence, and ring attention on its own two chunks (`apply.positions`); it returns the
largest differences of the outputs and of the gradients of q, k and v at its tokens, and the
bytes and messages its recorder counted. Used by the tests and by notebook 11.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mgpukit.measure.recorder import Recorder
from mgpukit.runtime.context import WorkerContext
from mgpukit.strategies.context_parallel.apply import positions
from mgpukit.strategies.context_parallel.ring import CPGroup, ring_attention


def ring_vs_full(ctx: WorkerContext, *, batch: int = 2, heads: int = 2, seq_len: int = 16, head_dim: int = 8,
                 seed: int = 0) -> dict:
    """Inside `mgpukit.launch(ring_vs_full, n, dims=ParallelDims(dp=n, cp=n), takes_context=True)`
    (module docstring): `ctx` is the worker's context, handed by the launch."""
    rec = Recorder(ctx)
    ring = CPGroup(rec=rec, group=ctx.group("cp"), ranks=tuple(ctx.axis_ranks("cp")), rank=ctx.coords["cp"])
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(batch, heads, seq_len, head_dim, generator=g) for _ in range(4))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*full, is_causal=True)
    out.backward(do)
    pos = positions(ring, seq_len)
    mine = [t[..., pos, :].clone().requires_grad_() for t in (q, k, v)]
    with rec.step(0):
        ring_out = ring_attention(*mine, ring)
        ring_out.backward(do[..., pos, :])
    diff = {"out": (ring_out - out[..., pos, :]).abs().max().item()}
    for name, a, b in zip("qkv", mine, full):
        diff["d" + name] = (a.grad - b.grad[..., pos, :]).abs().max().item()
    comm = rec.result()["comm"]
    return {"max_abs_diff": diff, "bytes_sent": comm["bytes_sent"],
            "messages": comm["collectives"].get("send", 0)}
