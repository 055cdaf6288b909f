"""The one trainer: every strategy, and every composition of them, trains through `train`.

Per step, on every rank:

    data   -> the rank's slice of the global batch, by its data-parallel coordinate
    engine -> forward + backward (micro-batches, or a pipeline schedule)  [parts.engine]
    sync   -> gradients averaged over the dp group                        [parts.sync]
    scale  -> fp16 only: gradients unscaled, an overflowing step skipped [parts.scaler]
    opt    -> optimizer step, then `parts.after_step` (ZeRO: gather shards)

and around the loop the seams every strategy shares: the input pipeline (`loader.py`:
`loader_delay_s`, `prefetch`), a straggler rank (`straggler.py`), unequal batches and
compute profiles per rank (`hetero.py`), dropping the slowest ranks (`backup.py`), the learning-rate rule
(`lr_scaling.py`), memory by category, and the checkpoint seam (`start_step`, `on_step_end`).

What is logged: the loss of the global batch and the norm of the full gradient, per step. Each
step reads both from the device at once (`building.read_step`: one multi-tensor norm, one
copy — the step's only wait for the device besides its timed bounds). They
are combined over ranks once, after training, in one untimed reduction over the world (a pipeline's loss
lives on its last stage, its gradient is spread over the stages; data-parallel replicas hold
the same averaged gradient), so logging never sits inside a timed step.

A non-finite loss or gradient (too high a learning rate; an overflow that fp16's loss scaler
does not handle) stops the run at once, before the optimizer step that would spread it into
the weights: `NonFiniteError` names the step and the rank. The check costs nothing extra — the gradient norm already logged is a float64
sum of every squared gradient element, non-finite exactly when some element is.

In shape mode (`mgpukit.measure.shape`: fake tensors at real scale) a loss or a gradient has
no value: nothing is checked for finiteness, the logged losses are None, and no weights come
back — the run is about time and memory.

The trainer is the only place that calls `optimizer.step()` (outside the parameter server,
which keeps its own topology): `tests/test_trainer.py` counts.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable

import torch.distributed as dist

from mgpukit.measure.allocator import start_meter
from mgpukit.measure.memory import memory_breakdown, reset_device_peak
from mgpukit.measure.progress import StepProgress, tick
from mgpukit.training.backup import DropSlowest
from mgpukit.training.building import read_step
from mgpukit.training.finite import NonFiniteError, check_finite  # noqa: F401 (re-exported)
from mgpukit.training.hetero import apply_rank_profile
from mgpukit.training.loader import BatchLoader
from mgpukit.training.lr_scaling import lr_schedule, set_lr
from mgpukit.training.parts import Parts
from mgpukit.training.straggler import IdleMarker, apply_straggler


@dataclasses.dataclass(kw_only=True)
class Checkpointing:
    """The checkpoint seam: where a run starts, and what happens after each step."""

    start_step: int = 0
    on_step_end: Callable[[int], None] | None = None  # e.g. save every k steps
    # this rank's share of the logged (loss, grad sq-norm) per step (`contribution`): summed
    # over the world they are the global values. A resumed run starts with the steps before
    # `start_step` (restored from the checkpoint), so its record covers the whole run.
    logs: list[tuple[float, float]] = dataclasses.field(default_factory=list)


def train(ctx, rec, cfg, parts: Parts, optimizer, *, loader=None,
          checkpoint: Checkpointing | None = None) -> dict | None:
    """Train `cfg.steps` steps; returns the full weights on rank 0 (None elsewhere)."""
    ckpt = checkpoint or Checkpointing()
    reset_device_peak(ctx.device)  # a GPU's high-water mark would outlive the previous run
    dp_size, dp_rank = ctx.size("dp"), ctx.coords["dp"]
    # the batch slice: the dp index (a context-parallel group reads one slice together)
    loader = loader or BatchLoader(cfg, *ctx.batch_coords, rec, start_step=ckpt.start_step)
    slowed = apply_straggler(rec, ctx, cfg.options)
    apply_rank_profile(rec, ctx, cfg.options)  # emulated mixed cluster (hetero.py)
    idle = (IdleMarker(rec, ctx.group("dp")) if cfg.options.get("straggler")
            or cfg.options.get("show_idle") else None)
    drop = DropSlowest(rec, ctx, cfg, parts.engine) if cfg.options.get("drop_slowest") else None
    lr_at = lr_schedule(cfg, dp_size)
    if lr_at is not None:
        rec.extra["lr"] = []
    logs = ckpt.logs
    shape = getattr(rec, "shape", False)  # fake tensors: no values to log or check
    # emulated: follow every allocation, for the caching allocator's high-water mark (on an
    # error the worker ends, and the mode with it)
    allocator = start_meter(rec, parts.module, optimizer)
    metering = contextlib.ExitStack()
    if allocator is not None:
        metering.enter_context(allocator)
    progress = StepProgress.for_rank(ctx)  # a real-scale model on CPU: the parent's progress bar
    tick(progress, -1, "model built")
    # gradients in no buffer of the strategy's own (one replica, torch DDP): zero_grad frees
    # them, as a user's loop does (`set_to_none=True`); kept as zeroed tensors after the last step
    # A pipeline stage keeps them: with freed gradients its first micro-batch's backward would skip
    # the `add_` the others issue, so its backward time would differ by micro-batch, and the
    # schedule's bubble with it (notebook 04 holds each schedule's emulated bubble to its closed form)
    free_grads = parts.sync.frees_grads and ctx.size("pp") == 1
    for step in range(ckpt.start_step, cfg.steps):
        with rec.step(step):
            with rec.compute("data"):
                x, y = loader.next(rec)
                x, y = x.to(ctx.device), y.to(ctx.device)
            tick(progress, step, "data")
            if drop is None:
                loss = parts.engine.forward_backward(x, y, slowed)
            elif drop.computes(step):  # backup workers: the slowest skip their compute
                start = rec.now()
                loss = parts.engine.forward_backward(x, y, slowed)
                drop.timed(rec.now() - start)
            else:
                loss = 0.0  # a zero gradient (left by zero_grad) and no share of the loss
            if idle is not None:
                idle.mark()
            tick(progress, step, "forward+backward")
            parts.sync.sync(step)
            tick(progress, step, "gradient sync")
            scale = parts.scaler.scale if parts.scaler is not None else 1.0
            finite = parts.scaler.unscale_(parts.params) if parts.scaler is not None else True
            if shape:
                sq_norm = None
            elif parts.grad_sq:  # tensor parallel: its own share of the norm
                sq_norm, loss = parts.grad_sq(), (None if loss is None else float(loss))
            else:  # the loss and the norm in one read: the step's one wait for the device
                loss, sq_norm = read_step(parts.params, loss)
            if finite and not shape:  # fp16's scaler skips an overflowing step by design; anything else stops here
                check_finite(loss / scale if loss is not None else None, sq_norm,
                             step=step, rank=ctx.rank)  # before the weights change
            if lr_at is not None:
                set_lr(optimizer, lr_at(step))
                rec.extra["lr"].append(lr_at(step))
            with rec.compute("opt"), slowed():
                if finite:  # fp16: a step whose gradients overflowed is skipped
                    optimizer.step()
                if not free_grads:
                    optimizer.zero_grad(set_to_none=False)  # keep .grad tensors (bucket views)
                elif step < cfg.steps - 1:  # as a plain loop: no zero_ per tensor, no add_ in backward
                    optimizer.zero_grad(set_to_none=True)
            if parts.after_step is not None:
                parts.after_step(step)  # e.g. ZeRO-1/2: all-gather the updated shards
            if parts.scaler is not None:
                parts.scaler.update(finite)
            tick(progress, step, "optimizer")
        logs.append(None if shape else
                    contribution(ctx, parts, loss / scale if loss is not None else None, sq_norm))
        if ckpt.on_step_end is not None:
            ckpt.on_step_end(step)
    metering.close()
    if free_grads and not shape:  # untimed: the record's memory counts the gradients, zeroed as before
        optimizer.zero_grad(set_to_none=False)
    if ckpt.start_step:  # the record's step times cover only the steps this run ran
        rec.extra["resumed_from_step"] = ckpt.start_step
    # shape mode: the bookkeeping below makes small real tensors (fake mode unset)
    with rec.untimed() if shape else contextlib.nullcontext():
        if shape:  # nothing has a value
            for _ in logs:
                rec.log(None)
        else:
            log_steps(rec, ctx, logs)
        rec.memory = memory_breakdown(parts.module, optimizer, parts.engine.meter, ctx.device, allocator=allocator)
        if parts.engine.memory_note:
            rec.memory["source"] += "; " + parts.engine.memory_note
        if shape:
            # one phrase, no nested parentheses in the figures' legends (issue 27)
            rec.memory["source"] = "shape mode: " + rec.memory["source"].replace(
                "measured tensor bytes", "the fake tensors' bytes")
        rec.extra.update(parts.engine.finish(cfg.steps))
        rec.extra.update(parts.extra)
        if parts.scaler is not None:
            rec.extra["loss_scale"] = {"final": parts.scaler.scale, "skipped_steps": parts.scaler.skipped,
                                       "history": parts.scaler.history}
    return None if shape else gather_weights(rec, ctx, parts)


def contribution(ctx, parts: Parts, loss: float | None, sq_norm: float) -> tuple[float, float]:
    """This rank's share of step's logged (loss, Σ‖g‖²): summed over the world, the loss of the
    global batch (held by the last stage of each replica, averaged over replicas) and the full
    gradient's squared norm (squares summed over the stages; replicas hold the same gradient,
    so their mean — unless each holds a disjoint shard of it, ZeRO, then their sum)."""
    dp = ctx.size("dp")
    replicas = 1 if parts.grads_sharded else dp
    return (loss / dp if parts.holds_loss and loss is not None else 0.0, sq_norm / replicas)


def log_steps(rec, ctx, logs: list[tuple[float, float]]) -> None:
    """Per step, the sum over the world of every rank's `contribution`: one untimed reduction."""
    flat = [v for pair in logs for v in pair]
    world = dist.group.WORLD if dist.is_initialized() and ctx.world_size > 1 else None
    total = rec.reduce_values(flat, group=world)
    for i in range(0, len(total), 2):
        rec.log(total[i], total[i + 1] ** 0.5)


def gather_weights(rec, ctx, parts: Parts) -> dict | None:
    """The unsharded weights on rank 0, names as in the unsplit model (untimed)."""
    mine = parts.state_dict()
    if ctx.size("pp") == 1:
        return mine if ctx.rank == 0 else None
    stage_ranks = ctx.axis_ranks("pp")
    every = [None] * len(stage_ranks) if ctx.rank == stage_ranks[0] else None
    with rec.untimed():
        dist.gather_object(mine, every, dst=stage_ranks[0], group=ctx.group("pp"))
    if ctx.rank != 0:
        return None
    merged = {}
    for part in every:
        merged.update(part)
    return merged
