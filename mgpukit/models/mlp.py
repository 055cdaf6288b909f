"""A plain MLP: the compute-bound workload for data-parallel and communication benchmarks.

``layers`` is a ``ModuleList``: ``n_layers - 1`` blocks of ``Linear + ReLU`` and a final plain
``Linear``, so a pipeline stage is a slice of it. ``d_hidden`` is the knob: the work per
sample grows as ``d_hidden**2`` while the activations sent between stages grow as
``d_hidden`` — wide layers make compute dominate communication.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass(frozen=True, kw_only=True)
class MLPConfig:
    """Sizes of an MLP with ``n_layers`` Linear layers (``n_layers - 1`` hidden activations)."""

    d_in: int
    d_hidden: int
    n_layers: int
    d_out: int

    def __post_init__(self) -> None:
        for name in ("d_in", "d_hidden", "n_layers", "d_out"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")


def mlp_tiny(**overrides) -> MLPConfig:
    """~0.14 M parameters: a fwd+bwd at batch 64 takes about half a millisecond on a CPU."""
    return MLPConfig(**{**dict(d_in=32, d_hidden=256, n_layers=4, d_out=8), **overrides})


def mlp_wide(**overrides) -> MLPConfig:
    """~8.9 M parameters: compute-bound, for measuring data-parallel scaling."""
    return MLPConfig(**{**dict(d_in=256, d_hidden=2048, n_layers=4, d_out=8), **overrides})


class MLP(nn.Module):
    """``forward(x (B, d_in)) -> (B, d_out)``. Built under a private, seeded RNG so every
    process holds identical weights (PyTorch's default Linear init)."""

    # what the appliers read of it (`models.layered.Layered`): layers only, no embedding or head
    layers_name, layer_kind, has_attention = "layers", "layers", False
    embed: nn.Module | None = None
    head: nn.Module | None = None

    def __init__(self, cfg: MLPConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        widths = [cfg.d_in] + [cfg.d_hidden] * (cfg.n_layers - 1) + [cfg.d_out]
        with torch.random.fork_rng(devices=[]):  # devices=[]: never touch CUDA here
            torch.manual_seed(seed)
            layers: list[nn.Module] = [
                nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in zip(widths[:-2], widths[1:-1])
            ]
            layers.append(nn.Linear(widths[-2], widths[-1]))
        self.layers = nn.ModuleList(layers)

    def repeated(self) -> nn.ModuleList:
        return self.layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)  # (B, d_hidden), last: (B, d_out)
        return x

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
