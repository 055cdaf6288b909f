"""Hooks: what an experiment adds around the one loop, without a branch in it.

The trainer (`trainer.py`) is the loop every strategy shares — data, forward and backward,
gradient sync, unscale and check, optimizer step. What a lesson adds to it — a straggler rank,
a mixed cluster, the wait for the slowest rank drawn as idle, backup workers that skip their
compute, a learning-rate rule, a progress bar, checkpoints — is a `Hook` the experiment
installs (`knob_hooks.hooks_for` turns the run's knobs into hooks). This is the callback shape
of Keras, Lightning and the Hugging Face `Trainer` (`TrainerCallback`), cut to the points this
loop has:

    on_train_start(loop)          before the first step (a resumed run sets `loop.start_step`)
    before_forward(loop, step)    the step's batch is loaded; forward has not begun
    after_backward(loop, step)    this rank's gradients are computed, not yet synchronised
    after_sync(loop, step)        the gradients are averaged over the data-parallel group
    after_step(loop, step)        the optimizer stepped and the step's time was taken
    on_train_end(loop)            after the last step, before the record is filled
    around_compute()              a context around each of this rank's compute phases
                                  (forward, backward, optimizer step): a measured straggler

A hook talks to the loop through `Loop`, and only through the fields the loop reads back:
`start_step` / `logs` (where a resumed run starts and the logs it restored). Everything else a
hook does — a clock's profile, a learning rate, an event on the timeline, an engine that skips
this rank's compute (`backup.DropSlowest`) — it does to the objects it is handed. A hook that
makes a run train other numbers than the single-process reference says so in `no_parity` (the
experiment then reports no parity, and why).
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from mgpukit.measure.progress import StepProgress


@dataclasses.dataclass(kw_only=True)
class Loop:
    """What the hooks see of a training run (module docstring)."""

    ctx: Any  # the worker context: rank, device, mesh
    rec: Any  # the Recorder: clock, events, `extra` figures for the record
    cfg: Any  # the RunConfig
    parts: Any  # the parallelized model (`parts.Parts`)
    optimizer: Any
    start_step: int = 0  # a resumed run starts later
    # this rank's share of the logged (loss, Σ‖g‖²) per step; a resumed run's restored steps first
    logs: list = dataclasses.field(default_factory=list)


class Hook:
    """A hook does nothing at any point unless it says otherwise (module docstring)."""

    no_parity: str | None = None  # why a run with this hook has no reference to compare with

    def on_train_start(self, loop: Loop) -> None:
        pass

    def before_forward(self, loop: Loop, step: int) -> None:
        pass

    def after_backward(self, loop: Loop, step: int) -> None:
        pass

    def after_sync(self, loop: Loop, step: int) -> None:
        pass

    def after_step(self, loop: Loop, step: int) -> None:
        pass

    def on_train_end(self, loop: Loop) -> None:
        pass

    def around_compute(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class Hooks(Hook):
    """Several hooks called in the order they were installed."""

    def __init__(self, hooks: Iterable[Hook] = ()):
        self.hooks = list(hooks)
        # only the hooks that wrap compute are entered around it (none: a bare nullcontext)
        self.wrapping = [h for h in self.hooks if type(h).around_compute is not Hook.around_compute]

    def around_compute(self) -> contextlib.AbstractContextManager:
        return self._wrapped() if self.wrapping else contextlib.nullcontext()

    @contextlib.contextmanager
    def _wrapped(self):
        with contextlib.ExitStack() as stack:
            for h in self.wrapping:
                stack.enter_context(h.around_compute())
            yield

    def on_train_start(self, loop):
        for h in self.hooks:
            h.on_train_start(loop)

    def before_forward(self, loop, step):
        for h in self.hooks:
            h.before_forward(loop, step)

    def after_backward(self, loop, step):
        for h in self.hooks:
            h.after_backward(loop, step)

    def after_sync(self, loop, step):
        for h in self.hooks:
            h.after_sync(loop, step)

    def after_step(self, loop, step):
        for h in self.hooks:
            h.after_step(loop, step)

    def on_train_end(self, loop):
        for h in self.hooks:
            h.on_train_end(loop)


class Progress(Hook):
    """Rank 0 writes one line per phase for the parent's progress bar (`measure/progress.py`;
    only a real-scale model on CPU asks for one: `ctx.options["progress_file"]`)."""

    def __init__(self):
        self.bar: StepProgress | None = None

    def on_train_start(self, loop):
        self.bar = StepProgress.for_rank(loop.ctx)
        self._tick(-1, "model built")

    def before_forward(self, loop, step):
        self._tick(step, "data")

    def after_backward(self, loop, step):
        self._tick(step, "forward+backward")

    def after_sync(self, loop, step):
        self._tick(step, "gradient sync")

    def after_step(self, loop, step):
        self._tick(step, "optimizer")

    def _tick(self, step: int, phase: str) -> None:
        if self.bar is not None:
            self.bar.tick(step, phase)


@dataclasses.dataclass(kw_only=True)
class Checkpointing(Hook):
    """The checkpoint seam (`checkpoint.checkpointing` builds one from the run's knobs): where
    a run starts, the logs it restored, and what happens after each step (save every k)."""

    start_step: int = 0
    on_step_end: Callable[[int], None] | None = None  # e.g. save every k steps
    # this rank's share of the logged (loss, grad sq-norm) per step, the restored steps first: a
    # resumed run's record covers the whole run
    logs: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    def on_train_start(self, loop):
        loop.start_step, loop.logs = self.start_step, self.logs

    def after_step(self, loop, step):
        if self.on_step_end is not None:
            self.on_step_end(step)

    def on_train_end(self, loop):
        if self.start_step:  # the record's step times cover only the steps this run ran
            loop.rec.extra["resumed_from_step"] = self.start_step
