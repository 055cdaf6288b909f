"""Measured time: the wall clock of a rank and the handles of its asynchronous work.

`WallClock` reads seconds since the launch began; on GPUs it synchronises the device only at
step boundaries (`sync`), so the overlap being measured is not removed by the measuring. An
async collective or send returns a `Handle` whose end is stamped when the work *completes* — a
future callback (collectives), a waiter thread (gloo point-to-point has no future) or a CUDA
event — not when someone gets round to calling `wait()`. `make_clock` picks the wall clock or
the virtual clock (`vclock.py`) for a worker's mode.
"""
from __future__ import annotations

import contextlib
import threading
import time

import torch

from mgpukit.measure.clock import Clock
from mgpukit.measure.vclock import VirtualClock
from mgpukit.runtime.context import WorkerContext


class WallClock:
    """Measured time: seconds since the launch began (the parent's perf_counter origin).

    `now()` is host time and never synchronises. On GPUs a region's bounds are `mark()`s:
    CUDA events recorded in stream order, turned into seconds at the step's end (`sync()`, the
    one `torch.cuda.synchronize()` per step boundary), so an event's end is when its kernels
    finished, not when they were queued — and backward, its hooks and DDP's comm hook keep
    overlapping as they would without the kit.
    """

    # what a measured run has none of (`measure.clock.Clock`: the virtual clock's members)
    emulated, profile, launches, waits, split = False, None, False, None, None

    def __init__(self, t0: float, device: torch.device):
        self.t0 = t0
        self.cuda = torch.device(device).type == "cuda"
        self._ref: tuple[float, object] | None = None  # (host seconds, CUDA event) at the last sync

    def now(self) -> float:
        return time.perf_counter() - self.t0

    @property
    def host(self) -> float:
        return self.now()

    def sync(self) -> None:
        """A step boundary: wait for the device, and pin device time to host time."""
        if self.cuda:
            torch.cuda.synchronize()
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            ev.synchronize()
            self._ref = (self.now(), ev)

    def mark(self):
        """"Here", in stream order: seconds on CPU; on GPUs a CUDA event read at the next `sync()`."""
        if not self.cuda:
            return self.now()
        if self._ref is None:
            self.sync()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return _CudaMark(ev, self._ref)

    def completion(self, work, *, future: bool = True):
        """A callable that waits for `work` and returns when it *finished* (not when it was
        waited for). `future=False`: the work is known to have no future (point-to-point)."""
        works = work.works if isinstance(work, Works) else [work]
        try:
            if not future:
                raise RuntimeError("no future")
            futures = [w.get_future() for w in works]
        except RuntimeError:  # gloo's send/recv have no future
            if self.cuda:  # an event after wait(): in stream order, no earlier than the end
                return lambda: (work.wait(), self.mark())[1]
            return _Waiter(work, self.t0).result  # a thread waits and stamps
        if self.cuda:  # the callback runs on streams that follow the work's kernels
            marked = torch.futures.collect_all(futures).then(lambda _: self.mark())
            return lambda: (work.wait(), marked.wait())[1]
        # the callback may run on gloo's thread: it only reads the clock
        stamped = torch.futures.collect_all(futures).then(lambda _: time.perf_counter())
        return lambda: (work.wait(), stamped.wait() - self.t0)[1]

    def counting(self):
        return contextlib.nullcontext()

    def paused(self):
        return contextlib.nullcontext()


class _CudaMark:
    """A CUDA event and the (host time, event) pair it is measured from."""

    def __init__(self, event, ref):
        self.event, self.ref = event, ref

    def seconds(self) -> float:
        host, ev = self.ref
        return host + ev.elapsed_time(self.event) / 1e3


class _Waiter:
    """Waits for a future-less work on a thread and notes the time it finished."""

    def __init__(self, work, t0: float):
        self.work, self.t0, self.end, self.error = work, t0, None, None
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        try:
            for w in (self.work.works if isinstance(self.work, Works) else [self.work]):
                w.wait()
            self.end = time.perf_counter() - self.t0
        except BaseException as e:  # re-raised by the thread that asked
            self.error = e

    def result(self) -> float:
        self.thread.join()  # gloo's wait() must not run twice on one work: only the thread waits
        if self.error is not None:
            raise self.error
        return self.end


class Handle:
    """What an async operation returns: `wait()` finishes it and records its end.

    `end`, when given, waits for the work and returns when it finished (`WallClock.completion`);
    `on_done(end)` is called once, with that time (or None).
    """

    def __init__(self, work, on_done, end=None):
        self._work, self._on_done, self._end, self._done = work, on_done, end, False

    def wait(self):
        if not self._done:
            self._done = True
            if self._end is not None:
                t = self._end()
            else:
                if self._work is not None:
                    self._work.wait()
                t = None
            self._on_done(t)
        return None

    def get_future(self):
        return self._work.get_future()

    @property
    def work(self):
        """The backend's `dist.Work` (for a library that waits on it itself, e.g. FSDP2)."""
        return self._work


class Works:
    """Several works finished together (the timestamp and the payload of an emulated send)."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()


def make_clock(ctx: WorkerContext) -> Clock:
    """The clock for this worker's mode: wall clock, or the virtual clock of its profile."""
    if ctx.is_emulated:
        return VirtualClock.for_context(ctx)
    return WallClock(ctx.t0, ctx.device)
