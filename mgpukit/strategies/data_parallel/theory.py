"""Predicted figures for data-parallel runs: bytes all-reduced per step, memory per rank."""
from __future__ import annotations


def dp_theory(cfg, dims) -> dict:
    """Every rank holds the full model; gradients are all-reduced once per step (ring)."""
    from mgpukit.strategies.common import build_model

    n_params = sum(p.numel() for p in build_model(cfg).parameters())
    param_bytes = 4 * n_params  # fp32
    n = dims.dp
    optimizer_states = 2 if cfg.optimizer == "adamw" else 1  # Adam: m and v; SGD: momentum
    return {
        "params": n_params,
        "comm_bytes": 2 * (n - 1) / n * param_bytes,  # bus bytes sent per rank per step
        "memory": {"params": param_bytes, "grads": param_bytes,
                   "optimizer": optimizer_states * param_bytes},
    }
