"""`dp-naive`: every rank computes gradients on its slice, then all-reduces them one by one.

Data parallelism in its simplest form. Each of the n ranks holds the whole model and runs
forward and backward on 1/n of the global batch. The mean loss over the global batch is the
mean of the ranks' mean losses, so its gradient is the mean of their gradients:

    g = (1/n) · Σ_r g_r        — one all-reduce (sum) per gradient, then a division by n

After that every rank holds the same gradient and takes the same optimizer step, so the
replicas stay identical without ever sending weights (Li et al. 2020, "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", VLDB, §3.2.1 "a naive solution"; Goyal
et al. 2017 train ImageNet in an hour with this synchronous SGD).

What it costs: a ring all-reduce of Ψ bytes moves 2(n-1)/n·Ψ per rank, and here nothing else
happens meanwhile — backward has finished, the optimizer cannot start. Worse, it is one
collective per parameter tensor (a GPT block has a dozen), each paying the latency α. Li et
al. §3.2.2-3.2.3 fix both: bucket the gradients (fewer, larger messages) and launch each bucket as
soon as backward has produced it (overlap) — see `bucketed.py`.

Collectives: none in forward; one blocking all-reduce per parameter after backward.
"""
from __future__ import annotations

import torch.distributed as dist

from mgpukit.strategies.common import build_model, build_optimizer
from mgpukit.strategies.data_parallel.loop import train_data_parallel
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import register


def all_reduce_gradients(rec, params, *, group=None) -> None:
    """Replace every gradient by its mean over the group: sum (all-reduce), then divide by n."""
    n = dist.get_world_size(group)
    for p in params:
        if p.grad is None:  # a parameter this step did not use
            continue
        rec.all_reduce(p.grad, group=group)
        p.grad.div_(n)


@register("dp-naive", family="data-parallel",
          description="all-reduce every gradient after backward, one by one (no overlap)",
          theory=dp_theory)
def run_dp_naive(ctx, rec, cfg):
    model = build_model(cfg).to(ctx.device)
    optimizer = build_optimizer(cfg, model.parameters())
    params = list(model.parameters())
    return train_data_parallel(ctx, rec, cfg, model, optimizer,
                               sync_grads=lambda step: all_reduce_gradients(rec, params))
