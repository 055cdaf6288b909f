"""Predicted figures for data-parallel runs: bytes all-reduced per step, memory per rank, speedup.

The speedup comes from the closed-form cost model (`mgpukit.costmodel.step_time`): compute per
GPU shrinks (strong scaling) or stays (weak scaling) while the gradient all-reduce costs
`2(n-1)/n · Ψ / β + 2(n-1)·α`, exposed whole (`dp-naive`) or hidden behind backward except for
the last bucket (`dp-bucketed`, DDP)."""
from __future__ import annotations

from mgpukit.costmodel import Layout, get_shape, load_profile, step_time
from mgpukit.costmodel.comm import bus_factor
from mgpukit.training.building import count_params


def dp_theory(cfg, dims) -> dict:
    """Every rank holds the full model; gradients are all-reduced once per step (ring)."""
    n_params = count_params(cfg)  # on the meta device: no weights allocated
    param_bytes = 4 * n_params  # fp32
    n = dims.dp
    optimizer_states = 2 if cfg.optimizer == "adamw" else 1  # Adam: m and v; SGD: momentum
    return {
        "params": n_params,
        "comm_bytes": bus_factor("all_reduce", n) * param_bytes,  # bus bytes sent per rank per step
        "memory": {"params": param_bytes, "grads": param_bytes,
                   "optimizer": optimizer_states * param_bytes},
    }


def predicted_tokens_per_s(model: str = "gpt-tiny", profile: str = "h100-nvlink", workers=(1, 2, 4, 8),
                           *, micro_batch: int = 8, global_batch: int | None = None, overlap: bool = True,
                           dtype: str = "fp32", bucket_mb: float = 25) -> dict[int, float]:
    """Cost-model tokens/s of n data-parallel GPUs (`mgpukit.costmodel.step_time`).

    Weak scaling (default): every GPU keeps `micro_batch` sequences, so the global batch grows
    with n. Strong scaling (`global_batch=B`): B is split over the n GPUs. `overlap=False` is
    `dp-naive` (the whole all-reduce exposed after backward); True is bucketed / DDP.
    """
    shape = get_shape(model)
    hw = load_profile(profile) if isinstance(profile, str) else profile  # a name or a HardwareProfile
    out = {}
    for n in workers:
        if global_batch is not None and global_batch % n:
            raise ValueError(f"global_batch={global_batch} does not split over {n} GPUs; "
                             f"use a multiple of {n}.")
        per_gpu = micro_batch if global_batch is None else global_batch // n
        layout = Layout(dp=n, micro_batch=per_gpu, dtype=dtype)
        out[n] = step_time(shape, layout, hw, overlap_dp=overlap,
                           bucket_bytes=bucket_mb * 2**20)["tokens_per_s"]
    return out


def predicted_speedup(model: str = "gpt-tiny", profile: str = "h100-nvlink", workers=(1, 2, 4, 8),
                      **kw) -> dict[int, float]:
    """tokens/s of n GPUs over one GPU (same keywords as `predicted_tokens_per_s`)."""
    tps = predicted_tokens_per_s(model, profile, sorted({1, *workers}), **kw)
    return {n: tps[n] / tps[1] for n in workers}


def predicted_records(model: str = "gpt-tiny", profile: str = "h100-nvlink", workers=(1, 2, 4, 8),
                      **kw) -> list[dict]:
    """Cost-model "records" (mode "analytic") for `dp-naive` and `dp-bucketed` at each worker
    count, shaped like run records so `mgpukit.plots.plot_speedup` draws them as predicted.
    Keywords as `predicted_tokens_per_s` (micro_batch, global_batch, dtype, bucket_mb)."""
    out = []
    for strategy, overlap in (("dp-naive", False), ("dp-bucketed", True)):
        tps = predicted_tokens_per_s(model, profile, sorted({1, *workers}), overlap=overlap, **kw)
        out += [{"strategy": strategy, "mode": "analytic", "profile": profile, "world_size": n,
                 "tokens_per_s": t, "model": model} for n, t in tps.items()]
    return out
