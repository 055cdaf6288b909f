"""What every strategy shares: building the model, optimizer and batches, and one train loop.

Each strategy differs in how it wraps the model and what it does between backward and the
optimizer step; the rest — data, loss, logging, memory — is here once, so the single-process
reference and the parallel runs train exactly the same thing.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from mgpukit.config import RunConfig
from mgpukit.data import get_batch, load_tokens, mlp_batch
from mgpukit.measure.memory import ActivationMeter, memory_breakdown


def build_model(cfg: RunConfig) -> torch.nn.Module:
    """Identical weights on every rank (seeded init), no parallelism inside."""
    from mgpukit.models import GPT, MLP

    mcfg = cfg.model_config()
    return GPT(mcfg, seed=cfg.seed) if cfg.is_gpt else MLP(mcfg, seed=cfg.seed)


def build_optimizer(cfg: RunConfig, params) -> torch.optim.Optimizer:
    params = list(params)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
    # foreach=False: the per-parameter loop, so numerics don't depend on how params are grouped
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, foreach=False)


class Batches:
    """The rank's slice of the global batch of each step (see `mgpukit.data`)."""

    def __init__(self, cfg: RunConfig, rank: int = 0, world_size: int = 1):
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.mcfg = cfg.model_config()
        self.tokens = load_tokens() if cfg.is_gpt else None

    def __call__(self, step: int):
        c = self.cfg
        if c.is_gpt:
            return get_batch(self.tokens, step=step, global_batch=c.global_batch,
                             seq_len=self.mcfg.seq_len, rank=self.rank,
                             world_size=self.world_size, seed=c.seed)
        return mlp_batch(step=step, global_batch=c.global_batch, d_in=self.mcfg.d_in,
                         d_out=self.mcfg.d_out, rank=self.rank, world_size=self.world_size,
                         seed=c.seed)


def loss_fn(cfg: RunConfig):
    from mgpukit.models.gpt import lm_loss

    return lm_loss if cfg.is_gpt else torch.nn.functional.mse_loss


def grad_norm(params) -> float:
    # float64: the norm's own rounding must not look like a parity difference
    grads = [p.grad.detach().flatten().double() for p in params if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat(grads))) if grads else 0.0


def global_mean(value: float, rec, group=None) -> float:
    """Mean of a per-rank scalar over the group — for logging only, so not timed or counted."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64)
    with rec.clock.paused():
        dist.all_reduce(t, group=group)
    return float(t.item()) / dist.get_world_size(group)


def full_state_dict(model: torch.nn.Module) -> dict:
    """CPU copies of the weights, names as in the unwrapped model (DDP's `module.` dropped)."""
    inner = getattr(model, "module", model)
    return {k: v.detach().to("cpu", copy=True) for k, v in inner.state_dict().items()}


def record_memory(rec, model, optimizer, meter: ActivationMeter, device=None):
    rec.memory = memory_breakdown(model, optimizer, meter, device)


def data_parallel_loop(ctx, rec, cfg: RunConfig, model, optimizer, *, sync_grads, no_sync=None,
                       params=None, device=None):
    """The loop of every data-parallel strategy: fwd, bwd, `sync_grads(step)`, step; log; memory.

    `sync_grads(step)` is where strategies differ (nothing for `single`, an all-reduce per
    gradient for `dp-naive`, …); gradient accumulation, the input pipeline, stragglers and
    learning-rate scaling live in `mgpukit.strategies.data_parallel.loop`.
    """
    from mgpukit.strategies.data_parallel.loop import train_data_parallel

    return train_data_parallel(ctx, rec, cfg, model, optimizer, sync_grads=sync_grads,
                               no_sync=no_sync, params=params, device=device)
