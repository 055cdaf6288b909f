"""What every run builds the same way: the model, the optimizer, the batches, the loss.

The single-process reference and every parallel layout train exactly the same thing: the same
seeded weights, the same global batches, the same optimizer. Parallelism is applied afterwards,
from outside, by the strategies' appliers (`mgpukit.parallelize`).
"""
from __future__ import annotations

import math

import torch

from mgpukit.config import RunConfig
from mgpukit.data import get_batch, load_tokens, mlp_batch
from mgpukit.models import GPT, MLP, MoEConfig, MoEGPT
from mgpukit.models.gpt import lm_loss
from mgpukit.training.batch_split import parse_split


def build_model(cfg: RunConfig) -> torch.nn.Module:
    """Identical weights on every rank (seeded init), no parallelism inside."""
    mcfg = cfg.model_config()
    if isinstance(mcfg, MoEConfig):  # the GPT with routed experts for MLPs (models/moe.py)
        return MoEGPT(mcfg, seed=cfg.seed)
    return GPT(mcfg, seed=cfg.seed) if cfg.is_gpt else MLP(mcfg, seed=cfg.seed)


def build_model_shapes(cfg: RunConfig) -> torch.nn.Module:
    """The same model on torch's meta device: every parameter has its shape and dtype and no
    storage, so counting a 7 B model's parameters costs nothing (built for real, a llama-7b is
    27 GB of fp32 in the process that asked). For the predictions (`theory`), never to train."""
    with torch.device("meta"):
        return build_model(cfg)


def count_params(cfg: RunConfig, *, trainable: bool = False) -> int:
    """Parameters of `cfg`'s model (shared ones once), counted without allocating them."""
    return sum(p.numel() for p in build_model_shapes(cfg).parameters() if p.requires_grad or not trainable)


def build_optimizer(cfg: RunConfig, params, ctx=None) -> torch.optim.Optimizer:
    """The optimizer a user would build: torch's defaults, so `foreach` (one multi-tensor kernel
    per operation instead of one per parameter) on GPUs and the per-parameter loop on CPUs. The
    two give bit-identical updates (each element sees the same arithmetic), so parity does not
    depend on which one runs or how parameters are grouped; forcing the loop (`foreach=False`)
    made the kit's GPU step pay ~7 launches per parameter that a plain loop does not.

    Emulated GPUs (`ctx.emulates_gpu`) hold CPU or fake tensors, for which torch would pick the
    per-parameter loop: the emulator would then time a program no GPU runs (gpt-tiny's SGD step
    as 276 launches, 2.8 ms of a 13.5 ms step on h100-nvlink). So `foreach` is chosen there
    explicitly, as the GPU's default would be (`measure.plainstep` does the same)."""
    params = list(params)
    foreach = True if ctx is not None and ctx.emulates_gpu else None
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, foreach=foreach)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, foreach=foreach)


class Batches:
    """The slice `rank` of `world_size` of the global batch of each step (see `mgpukit.data`):
    a batch depends only on (seed, step, slice), so resume and parity come free."""

    def __init__(self, cfg: RunConfig, rank: int = 0, world_size: int = 1, *, shape: bool = False):
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.mcfg = cfg.model_config()
        self.shape = shape  # shape mode: batches of the right shape, no data
        self.tokens = load_tokens() if cfg.is_gpt and not shape else None
        self.split = parse_split(cfg.options.get("batch_split"))  # unequal rows per rank, or None

    def __call__(self, step: int):
        c = self.cfg
        if self.shape:  # made under fake mode: shapes only (all zeros: values never matter)
            rows = c.global_batch // self.world_size
            if c.is_gpt:
                x = torch.zeros(rows, self.mcfg.seq_len, dtype=torch.long)
                return x, torch.zeros_like(x)
            return torch.zeros(rows, self.mcfg.d_in), torch.zeros(rows, self.mcfg.d_out)
        if c.is_gpt:
            return get_batch(self.tokens, step=step, global_batch=c.global_batch,
                             seq_len=self.mcfg.seq_len, rank=self.rank,
                             world_size=self.world_size, seed=c.seed, split=self.split)
        x, y = mlp_batch(step=step, global_batch=c.global_batch, d_in=self.mcfg.d_in,
                         d_out=self.mcfg.d_out, rank=self.rank, world_size=self.world_size, split=self.split,
                         seed=c.seed)
        # `input_grad`: the first layer's backward computes dx too, as every later layer's does
        return (x.requires_grad_(), y) if c.options.get("input_grad") else (x, y)


def loss_fn(cfg: RunConfig):
    return lm_loss if cfg.is_gpt else torch.nn.functional.mse_loss


def grad_sq_norm(params) -> float:
    """Σ‖g‖² over `params`, accumulated in float64 (its own rounding must not look like a parity
    difference). One multi-tensor norm per (device, dtype) — not a cast, a square and a sum per
    parameter (~4 kernels × every parameter, every step) — and one read of the result."""
    return read_step(params)[1]


def read_step(params, loss=None) -> tuple[float | None, float]:
    """(the loss, Σ‖g‖²) in ONE read from the device: one multi-tensor norm per (device, dtype)
    (float64), the norms and the loss stacked into one vector, copied to the host at once (one
    wait for the device, not one per `.item()`); the squares are summed on the host (`math.fsum`,
    exactly rounded). `loss`: a 0-dim tensor, a float, or None (then the first value is None).

    Three ops (norm, stack, copy) and one sync per step: what the kit issues beyond a plain loop
    to log the gradient norm and to stop on a non-finite loss or gradient before the optimizer
    step (`tests/test_overhead.py` counts them)."""
    groups: dict[tuple, list] = {}
    for p in params:
        if p.grad is not None:
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad  # a DTensor: my shard
            groups.setdefault((g.device, g.dtype), []).append(g)
    norms = [n for grads in groups.values() for n in torch._foreach_norm(grads, 2, dtype=torch.float64)]
    on_device = isinstance(loss, torch.Tensor)
    if not norms and not on_device:
        return (None if loss is None else float(loss)), 0.0
    where = norms[0].device if norms else loss.device
    values = torch.stack([n.to(where) for n in norms] + ([loss.to(where)] if on_device else [])).tolist()
    if on_device:
        loss = values.pop()
    return (None if loss is None else float(loss)), math.fsum(v * v for v in values)


def grad_norm(params) -> float:
    return grad_sq_norm(params) ** 0.5
