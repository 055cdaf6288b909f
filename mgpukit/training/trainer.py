"""The one trainer: every strategy, and every composition of them, trains through `train`.

Per step, on every rank:

    data   -> the rank's slice of the global batch, by its data-parallel coordinate
    engine -> forward + backward (micro-batches, or a pipeline schedule)  [parts.engine]
    sync   -> gradients averaged over the dp group                        [parts.sync]
    scale  -> fp16 only: gradients unscaled, an overflowing step skipped [parts.scaler]
    opt    -> optimizer step, then `parts.after_step` (ZeRO: gather shards)

That is all `train` does. What a lesson adds around it — a straggler rank (`straggler.py`),
a mixed cluster (`hetero.py`), dropping the slowest ranks (`backup.py`), the learning-rate rule
(`lr_scaling.py`), a progress bar, checkpoints (`checkpoint.py`) — is a hook the experiment
installs (`hooks.py`; `knob_hooks.hooks_for` turns the run's knobs into hooks), never a branch
here. The input pipeline is `loader.py` (`loader_delay_s`, `prefetch`, `batch_split`).

What is logged: the loss of the global batch and the norm of the full gradient, per step. Each
step reads both from the device at once (`building.read_step`: one multi-tensor norm, one
copy — the step's only wait for the device besides its timed bounds). They are combined over
ranks once, after training, in one untimed reduction over the world (a pipeline's loss lives on
its last stage, its gradient is spread over the stages; data-parallel replicas hold the same
averaged gradient), so logging never sits inside a timed step.

A non-finite loss or gradient (too high a learning rate; an overflow that fp16's loss scaler
does not handle) stops the run at once, before the optimizer step that would spread it into
the weights: `NonFiniteError` names the step and the rank. The check costs nothing extra — the
gradient norm already logged is a float64 sum of every squared gradient element, non-finite
exactly when some element is.

In shape mode (`mgpukit.measure.shape`: fake tensors at real scale) a loss or a gradient has
no value: nothing is checked for finiteness, the logged losses are None, and no weights come
back — the run is about time and memory.

The trainer is the only place that calls `optimizer.step()` (outside the parameter server,
which keeps its own topology): `tests/test_trainer.py` counts.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch.distributed as dist

from mgpukit.measure.allocator import start_meter
from mgpukit.measure.memory import memory_breakdown, reset_device_peak
from mgpukit.training.building import read_step
from mgpukit.training.finite import NonFiniteError, check_finite  # noqa: F401 (re-exported)
from mgpukit.training.hooks import Checkpointing, Hook, Hooks, Loop  # noqa: F401 (Checkpointing re-exported)
from mgpukit.training.loader import BatchLoader
from mgpukit.training.parts import Parts


def train(ctx, rec, cfg, parts: Parts, optimizer, *, hooks: Sequence[Hook] = (),
          loader=None) -> dict | None:
    """Train `cfg.steps` steps; returns the full weights on rank 0 (None elsewhere)."""
    hooks, loop = Hooks(hooks), Loop(ctx=ctx, rec=rec, cfg=cfg, parts=parts, optimizer=optimizer)
    reset_device_peak(ctx.device)  # a GPU's high-water mark would outlive the previous run
    hooks.on_train_start(loop)  # a straggler slows this rank; a resumed run starts later …
    # the batch slice: the dp index (a context-parallel group reads one slice together)
    loader = loader or BatchLoader(cfg, *ctx.batch_coords, rec, start_step=loop.start_step)
    # emulated: follow every allocation, for the caching allocator's high-water mark
    allocator = start_meter(rec, parts.module, optimizer)
    # gradients in no buffer of the strategy's own (one replica, torch DDP): zero_grad frees
    # them, as a user's loop does (`set_to_none=True`); kept as zeroed tensors after the last step
    # A pipeline stage keeps them: with freed gradients its first micro-batch's backward would skip
    # the `add_` the others issue, so its backward time would differ by micro-batch, and the
    # schedule's bubble with it (notebook 04 holds each schedule's emulated bubble to its closed form)
    free_grads = parts.sync.frees_grads and ctx.size("pp") == 1
    with allocator if allocator is not None else contextlib.nullcontext():
        for step in range(loop.start_step, cfg.steps):
            with rec.step(step):
                with rec.compute("data"):
                    x, y = loader.next(rec)
                    x, y = x.to(ctx.device), y.to(ctx.device)
                hooks.before_forward(loop, step)
                loss = parts.engine.forward_backward(x, y, hooks.around_compute)
                hooks.after_backward(loop, step)
                parts.sync.sync(step)
                hooks.after_sync(loop, step)
                # fp16: gradients unscaled; an overflowing step is skipped by design
                finite = parts.scaler.unscale_(parts.params) if parts.scaler is not None else True
                loss, sq_norm = step_values(rec, parts, loss)  # the step's one wait for the device
                if finite and not rec.shape:  # anything non-finite stops here, before the weights change
                    check_finite(loss, sq_norm, step=step, rank=ctx.rank)
                with rec.compute("opt"), hooks.around_compute():
                    if finite:
                        optimizer.step()
                    if not free_grads:
                        optimizer.zero_grad(set_to_none=False)  # keep .grad tensors (bucket views)
                    elif step < cfg.steps - 1:  # as a plain loop: no zero_ per tensor, no add_ in backward
                        optimizer.zero_grad(set_to_none=True)
                if parts.after_step is not None:
                    parts.after_step(step)  # e.g. ZeRO-1/2: all-gather the updated shards
                if parts.scaler is not None:
                    parts.scaler.update(finite)
            loop.logs.append(None if rec.shape else contribution(ctx, parts, loss, sq_norm))
            hooks.after_step(loop, step)
    if free_grads and not rec.shape:  # untimed: the record's memory counts the gradients, zeroed as before
        optimizer.zero_grad(set_to_none=False)
    hooks.on_train_end(loop)
    record_run(loop, allocator)
    return None if rec.shape else gather_weights(rec, ctx, parts)


def step_values(rec, parts: Parts, loss) -> tuple[float | None, float | None]:
    """This rank's loss (unscaled: fp16's scaler multiplied it by S) and Σ‖g‖² of its share of
    the gradient, read from the device together; (None, None) in shape mode (no values)."""
    if rec.shape:
        return None, None
    scale = parts.scaler.scale if parts.scaler is not None else 1.0
    if parts.grad_sq:  # tensor parallel: its own share of the norm
        sq_norm, loss = parts.grad_sq(), (None if loss is None else float(loss))
    else:  # the loss and the norm in one read
        loss, sq_norm = read_step(parts.params, loss)
    return (None if loss is None else loss / scale), sq_norm


def record_run(loop: Loop, allocator) -> None:
    """After training, untimed: the logs combined over ranks, memory by category, the engine's
    and the strategy's own figures."""
    rec, ctx, parts = loop.rec, loop.ctx, loop.parts
    # shape mode: the bookkeeping below makes small real tensors (fake mode unset)
    with rec.untimed() if rec.shape else contextlib.nullcontext():
        if rec.shape:  # nothing has a value
            for _ in loop.logs:
                rec.log(None)
        else:
            log_steps(rec, ctx, loop.logs)
        rec.memory = memory_breakdown(parts.module, loop.optimizer, parts.engine.meter, ctx.device,
                                      allocator=allocator)
        if parts.engine.memory_note:
            rec.memory["source"] += "; " + parts.engine.memory_note
        if rec.shape:
            # one phrase, no nested parentheses in the figures' legends (issue 27)
            rec.memory["source"] = "shape mode: " + rec.memory["source"].replace(
                "measured tensor bytes", "the fake tensors' bytes")
        rec.extra.update(parts.engine.finish(loop.cfg.steps))
        rec.extra.update(parts.extra)
        if parts.scaler is not None:
            rec.extra["loss_scale"] = {"final": parts.scaler.scale, "skipped_steps": parts.scaler.skipped,
                                       "history": parts.scaler.history}


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
