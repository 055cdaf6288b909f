"""`allreduce-ring`: data parallelism whose gradient all-reduce is the ring written here.

The same training as `dp-naive` / `ddp` — every rank holds the model, takes its slice of the
batch, and averages gradients before the optimizer step — but the average is one
`ring_all_reduce` of all gradients flattened into one buffer (one big message, like a single
DDP bucket), built from send/recv in `collectives.py`. Parity with `single` shows the
hand-written collective is exact enough to train with; the timeline shows its ``2(n-1)`` send
and recv steps, and the bytes each rank sends are ``2(n-1)/n · 4Ψ`` per step.
"""
from __future__ import annotations

import torch

from mgpukit.strategies.common import build_model, build_optimizer, data_parallel_loop
from mgpukit.strategies.communication.collectives import ring_all_reduce
from mgpukit.strategies.communication.param_server import unpack
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import register


@register("allreduce-ring", family="communication",
          description="data parallel; gradients averaged by the ring all-reduce written from send/recv",
          theory=dp_theory)
def run_allreduce_ring(ctx, rec, cfg):
    model = build_model(cfg).to(ctx.device)
    params = list(model.parameters())
    optimizer = build_optimizer(cfg, params)
    flat = torch.empty(sum(p.numel() for p in params), device=ctx.device)

    def sync_grads(step):
        with rec.compute("pack"):
            torch.cat([p.grad.reshape(-1) for p in params], out=flat)
        ring_all_reduce(rec, flat)
        with rec.compute("pack"):
            flat.div_(ctx.world_size)
            unpack(flat, [p.grad for p in params])

    return data_parallel_loop(ctx, rec, cfg, model, optimizer, sync_grads=sync_grads)
