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

Collectives: none in forward; one blocking all-reduce per parameter after backward, over the
data-parallel group. It is also the default gradient sync of the pipeline strategies when
they are combined with data parallelism (dp × pp).
"""
from __future__ import annotations

import contextlib

import torch.distributed as dist

from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import register


def all_reduce_gradients(rec, params, *, group) -> None:
    """Replace every gradient by its mean over the group: sum (all-reduce), then divide by n."""
    n = dist.get_world_size(group)
    for p in params:
        if p.grad is None:  # a parameter this step did not use
            continue
        g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad  # a DTensor's own shard
        rec.all_reduce(g, group=group)
        g.div_(n)


class AllReduceSync:
    """After backward, every gradient all-reduced over the dp group (module docstring)."""

    def __init__(self, rec, params, group):
        self.rec, self.params, self.group = rec, list(params), group

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return contextlib.nullcontext()  # backward never communicates by itself

    def sync(self, step: int) -> None:
        all_reduce_gradients(self.rec, self.params, group=self.group)


def apply_allreduce_dp(module, ctx, rec, cfg):
    """The applier: `module` unchanged, its gradients averaged after backward."""
    return module, AllReduceSync(rec, module.parameters(), ctx.group("dp"))


register("dp-naive", family="data-parallel",
         description="all-reduce every gradient after backward, one by one (no overlap)",
         grad_sync=apply_allreduce_dp, composes=("dp", "pp", "tp"), theory=dp_theory)
