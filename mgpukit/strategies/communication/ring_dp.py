"""`allreduce-ring`: data parallelism whose gradient all-reduce is the ring written here.

The same training as `dp-naive` / `ddp` — every rank holds the model, takes its slice of the
batch, and averages gradients before the optimizer step — but the average is one
`ring_all_reduce` of all gradients flattened into one buffer (one big message, like a single
DDP bucket), built from send/recv in `collectives.py`. Parity with `single` shows the
hand-written collective is exact enough to train with; the timeline shows its ``2(n-1)`` send
and recv steps, and the bytes each rank sends are ``2(n-1)/n · 4Ψ`` per step.
"""
from __future__ import annotations

import contextlib

import torch

from mgpukit.strategies.communication.collectives import ring_all_reduce
from mgpukit.strategies.communication.param_server import unpack
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import register


class RingSync:
    """All gradients flattened into one buffer, averaged by the hand-written ring."""

    def __init__(self, rec, params, group, device):
        self.rec, self.params, self.group = rec, list(params), group
        self.n = torch.distributed.get_world_size(group)
        self.flat = torch.empty(sum(p.numel() for p in self.params), device=device)

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return contextlib.nullcontext()

    def sync(self, step: int) -> None:
        rec, flat = self.rec, self.flat
        with rec.compute("pack"):
            torch.cat([p.grad.reshape(-1) for p in self.params], out=flat)
        ring_all_reduce(rec, flat, self.group)
        with rec.compute("pack"):
            flat.div_(self.n)
            unpack(flat, [p.grad for p in self.params])


def apply_ring_dp(module, ctx, rec, cfg):
    return module, RingSync(rec, module.parameters(), ctx.group("dp"), ctx.device)


register("allreduce-ring", family="communication",
         description="data parallel; gradients averaged by the ring all-reduce written from send/recv",
         grad_sync=apply_ring_dp, composes=("dp", "pp"), theory=dp_theory)
