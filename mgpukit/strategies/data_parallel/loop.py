"""The data-parallel training loop, with gradient accumulation and the knobs of notebook 01.

One optimizer step is `k = cfg.micro_batches` micro-steps on this rank's slice of the global
batch. Each runs forward and backward on 1/k of the rows with the loss divided by k, so the
gradients summed in `p.grad` are the gradient of the mean loss over the whole slice: the same
step as one large batch (Goyal et al. 2017, §2), at the activation memory of a small one.
Gradients are communicated only after the last micro-step — the others run inside `no_sync()`
(torch DDP's `no_sync`, our strategies' own switch) — so k micro-steps cost k× compute but 1×
communication.

    data  -> [fwd_0, bwd_0] ... [fwd_{k-1}, bwd_{k-1}, comm] -> sync_grads -> opt

The strategies differ only in `sync_grads(step)` (what runs after backward) and `no_sync`
(how to keep backward from communicating); the rest is here once:

- batches come from `BatchLoader` (`loader.py`: `loader_delay_s`, `prefetch`), timed as a
  `data` event;
- a straggler rank is slowed down (`straggler.py`: `straggler`) and the wait of the others is
  recorded as `idle`;
- the learning rate follows the linear scaling rule with warmup (`lr_scaling.py`).

Loss and gradient norm are logged as the mean over ranks, which for equal shards equals the
single-process value — that is what the parity check compares.
"""
from __future__ import annotations

import contextlib

from mgpukit.data import split_microbatches
from mgpukit.measure.memory import ActivationMeter
from mgpukit.strategies.common import full_state_dict, global_mean, grad_norm, loss_fn, record_memory
from mgpukit.strategies.data_parallel.loader import BatchLoader
from mgpukit.strategies.data_parallel.lr_scaling import lr_schedule, set_lr
from mgpukit.strategies.data_parallel.straggler import IdleMarker, apply_straggler


def train_data_parallel(ctx, rec, cfg, model, optimizer, *, sync_grads, no_sync=None, params=None,
                        device=None):
    """Train `cfg.steps` steps; returns `{"weights": ...}` on rank 0 (see the module docstring).

    sync_grads(step): called once per step after the last backward (average the gradients).
    no_sync(): a context manager in which backward must not communicate (None: backward never
    communicates by itself, as in `dp-naive` and `single`).
    """
    params = list(params if params is not None else model.parameters())
    device = device or ctx.device
    k = cfg.micro_batches
    loader = BatchLoader(cfg, ctx.rank, ctx.world_size, rec)
    loss_of = loss_fn(cfg)
    meter = ActivationMeter(params)
    slowed = apply_straggler(rec, ctx, cfg.options)
    idle = IdleMarker(rec) if cfg.options.get("straggler") or cfg.options.get("show_idle") else None
    lr_at = lr_schedule(cfg, ctx.world_size)
    if lr_at is not None:
        rec.extra["lr"] = []
    for step in range(cfg.steps):
        with rec.step(step):
            with rec.compute("data"):
                x, y = loader.next(rec)
                x, y = x.to(device), y.to(device)
            loss_sum = 0.0
            for m, (xm, ym) in enumerate(split_microbatches(x, y, k)):
                last = m == k - 1
                mb = m if k > 1 else None
                with (contextlib.nullcontext() if last or no_sync is None else no_sync()):
                    with rec.compute("fwd", microbatch=mb), meter.track(), slowed():
                        loss = loss_of(model(xm), ym) / k  # mean over the slice, not a sum of means
                    with rec.compute("bwd", microbatch=mb), slowed():
                        loss.backward()
                loss_sum += loss.item()
            if idle is not None:
                idle.mark()
            sync_grads(step)
            norm = grad_norm(params)
            if lr_at is not None:
                set_lr(optimizer, lr_at(step))
                rec.extra["lr"].append(lr_at(step))
            with rec.compute("opt"), slowed():
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)  # keep .grad tensors (bucket views)
        rec.log(global_mean(loss_sum, rec), norm)
    record_memory(rec, model, optimizer, meter, device)
    return {"weights": full_state_dict(model)} if ctx.rank == 0 else None
