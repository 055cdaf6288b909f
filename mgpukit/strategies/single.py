"""`single`: one process trains on the whole global batch — the reference every strategy's
parity is checked against (same data, same init, same optimizer; fp32)."""
from __future__ import annotations

from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.common import build_model, build_optimizer, data_parallel_loop
from mgpukit.strategies.registry import register


def _theory(cfg, dims):
    from mgpukit.strategies.data_parallel.theory import dp_theory

    return dp_theory(cfg, dims)


@register("single", family="reference", description="one process, the whole batch: the parity reference",
          dims=lambda n: ParallelDims(dp=1, world_size=n), min_workers=1, default_workers=1,
          reference=None, theory=_theory)
def run_single(ctx, rec, cfg):
    model = build_model(cfg).to(ctx.device)
    optimizer = build_optimizer(cfg, model.parameters())
    return data_parallel_loop(ctx, rec, cfg, model, optimizer, sync_grads=lambda step: None)
