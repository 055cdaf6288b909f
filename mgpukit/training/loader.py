"""The input pipeline of a data-parallel rank: a batch per step, possibly slow, possibly prefetched.

A GPU that waits for its next batch does nothing. When loading a batch (reading, decoding,
augmenting) takes longer than a step, every worker idles for the difference each step — and
adding workers does not help, since each has its own loader. The fix every framework uses is
to load ahead: a background worker prepares the next batches while the current step computes
(`torch.utils.data.DataLoader(num_workers=..., prefetch_factor=...)`; `prefetch` in tf.data,
Murray et al. 2021, "tf.data: A Machine Learning Data Processing Framework", VLDB). Then only
`max(0, load - step)` stays exposed per step.

Knobs (in `RunConfig.options`):

- `loader_delay_s`: seconds each batch takes to load (the slow-loader knob of
  `mgpukit.data.iter_batches`): slept in measured mode, charged to the virtual clock when
  emulated.
- `prefetch`: how many batches a background thread keeps ready (a queue of that depth;
  `True` means 2). 0 / absent: load on demand, on the critical path.

`BatchLoader.next(rec)` returns the rank's `(x, y)` of the next step; the training loop wraps
it in `rec.compute("data")`, so the timeline shows how long each rank waited for its data.
"""
from __future__ import annotations

import queue
import threading
import time

from mgpukit.training.building import Batches


def loader_options(options: dict) -> tuple[float, int]:
    """(delay_s, prefetch depth) from a run's options, checked."""
    delay = float(options.get("loader_delay_s", 0.0) or 0.0)
    prefetch = options.get("prefetch", 0) or 0
    prefetch = 2 if prefetch is True else int(prefetch)
    if delay < 0 or prefetch < 0:
        raise ValueError(f"loader_delay_s={delay} and prefetch={prefetch} must be >= 0.")
    return delay, prefetch


class BatchLoader:
    """This rank's batches for steps 0..steps-1, in order (see the module docstring)."""

    def __init__(self, cfg, rank: int, world_size: int, rec, *, steps: int | None = None,
                 start_step: int = 0):
        self.batches = Batches(cfg, rank, world_size, shape=rec.shape)
        self.steps = cfg.steps if steps is None else steps
        self.delay, self.depth = loader_options(cfg.options)
        self.emulated = rec.clock.emulated
        self._start = self._step = start_step  # a resumed run picks up its data where it stopped
        self._queue = None
        # Emulated prefetch: the loader thread's virtual timeline (when it is free to start
        # the next batch; when each batch was taken off the queue).
        self._loader_free = rec.now()
        self._taken: list[float] = []
        if self.depth and not self.emulated:
            self._queue = queue.Queue(maxsize=self.depth)
            threading.Thread(target=self._produce, daemon=True, name="mgpukit-prefetch").start()

    def _load(self, step: int):
        if self.delay and not self.emulated:
            time.sleep(self.delay)  # the slow part of a real pipeline: I/O, decoding
        return self.batches(step)

    def _produce(self):
        try:
            for step in range(self._start, self.steps):
                self._queue.put(self._load(step))  # blocks while `depth` batches wait unconsumed
        except BaseException as e:  # hand it to the training loop instead of leaving it waiting
            self._queue.put(e)

    def next(self, rec):
        """The next step's batch. Call inside `rec.compute("data")`: the wait is the event."""
        step, self._step = self._step, self._step + 1
        if self._queue is not None:
            batch = self._queue.get()
            if isinstance(batch, BaseException):
                raise RuntimeError("the prefetch thread failed to load a batch") from batch
            return batch
        with rec.untimed():  # building the batch is host work, not accelerator time
            batch = self._load(step)
        if self.emulated and self.delay:
            rec.clock.join(self._virtual_ready(rec.now()), record=False, host=True)  # the host waits for it
        return batch

    def _virtual_ready(self, now: float) -> float:
        """When the batch asked for at virtual time `now` is in hand.

        No prefetch: loading starts now. Prefetch depth q: the loader thread starts batch i as
        soon as it has queued batch i-1, and may queue it once batch i-q was taken.
        """
        if not self.depth:
            return now + self.delay
        i = len(self._taken)
        queued = self._loader_free + self.delay
        if i >= self.depth:
            queued = max(queued, self._taken[i - self.depth])
        self._loader_free = queued
        taken = max(now, queued)
        self._taken.append(taken)
        return taken
