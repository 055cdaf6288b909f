"""Stragglers: synchronous data parallelism runs at the pace of its slowest rank.

Every step ends with an all-reduce that no rank can finish before the last one has produced
its gradients, so one rank `factor`× slower (a throttled GPU, a noisy neighbour, a slow link)
makes every rank wait: the others sit idle before the all-reduce for `(factor - 1)` times
their compute. Dean et al. 2012 ("Large Scale Distributed Deep Networks") answer with
asynchronous updates (Downpour SGD); Chen et al. 2016 ("Revisiting Distributed Synchronous
SGD") measure the tail of worker times and add backup workers instead (`backup.py`:
the knob `drop_slowest`); when the slowness is known, `hetero.py` re-balances the batch.

The knob `options["straggler"] = {"rank": 1, "factor": 3}` makes one rank that much slower:

- **measured**: a dispatch mode times every aten op the rank runs (on GPUs with CUDA events,
  since a launch returns before its kernel ran) and sleeps `(factor - 1)`× its duration (pooled into ≥ 1 ms sleeps), so forward, backward and the optimizer all stretch
  evenly — gradient hooks in backward fire at the stretched times, as on a slow GPU;
- **emulated**: the rank's virtual clock runs on a profile (`VirtualClock.slow_down`) with `factor`× less FLOP/s and
  memory bandwidth, `factor`× the host's per-op dispatch and `factor`× each GEMM and attention
  kernel's fixed latency (its links unchanged), so its forward and backward take `factor`×
  longer, exactly — launch-bound or not (`tests/test_stragglers.py`).

`MarkIdle` makes the wait explicit: after backward, ranks exchange when they finished (an
untimed bookkeeping exchange) and each records an `idle` event from its own finish to the
slowest rank's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from mgpukit.training.hooks import Hook


# a rank 1,000x slower already turns a step of milliseconds into seconds; more is a typo (1e308
# made the sleeps overflow inside the ranks)
MAX_FACTOR = 1000.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Straggler:
    rank: int
    factor: float

    @classmethod
    def from_options(cls, options: dict, world_size: int) -> "Straggler | None":
        spec = options.get("straggler")
        if not spec:
            return None
        unknown = sorted(set(spec) - {"rank", "factor"})
        rank, factor = spec.get("rank", world_size - 1), spec.get("factor", 2.0)
        if (unknown or isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size
                or isinstance(factor, bool) or not isinstance(factor, (int, float))
                or not math.isfinite(factor) or not 1 <= factor <= MAX_FACTOR):
            extra = f" (unknown key(s) {unknown})" if unknown else ""
            raise ValueError(f"straggler={spec!r}{extra}: give {{\"rank\": R, \"factor\": F}} with R a "
                             f"whole number in [0, {world_size}) — this run has {world_size} rank(s) — "
                             f"and F a number from 1 to {MAX_FACTOR:g}.")
        return cls(rank=rank, factor=float(factor))


class _SlowDown(TorchDispatchMode):
    """Sleeps `(factor - 1)`× the duration of every aten op (measured mode's straggler)."""

    def __init__(self, factor: float, device=None):
        super().__init__()
        self.extra = factor - 1.0
        self.debt = 0.0  # seconds of sleep owed; paid in chunks so sleep overshoot stays small
        self.cuda = device is not None and torch.device(device).type == "cuda"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace != "aten":  # collectives (c10d) are not this rank's compute
            return func(*args, **(kwargs or {}))
        if self.cuda:
            out, seconds = self._timed_on_device(func, args, kwargs)
        else:
            start = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            seconds = time.perf_counter() - start
        self.debt += self.extra * seconds
        if self.debt >= 1e-3:
            slept = time.perf_counter()
            time.sleep(self.debt)
            self.debt -= time.perf_counter() - slept
        return out

    @staticmethod
    def _timed_on_device(func, args, kwargs):
        """On a GPU the op only queues a kernel: time the kernel with CUDA events (and wait for
        this one event — a slow GPU holds its host back just as much)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = func(*args, **(kwargs or {}))
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1e3


class Straggle(Hook):
    """Installed by the `straggler` knob: rank `s.rank` computes `s.factor`× slower (module
    docstring) — on the virtual clock its hardware is slower (`VirtualClock.slow_down`); measured,
    its compute runs under `_SlowDown` (the loop enters `around_compute` around each compute)."""

    def __init__(self, straggler: Straggler):
        self.s = straggler
        self.mode: _SlowDown | None = None  # measured, on the slow rank

    def on_train_start(self, loop):
        s, rec = self.s, loop.rec
        if s.rank != loop.ctx.rank or s.factor == 1:
            return
        if rec.clock.emulated:
            rec.clock.slow_down(s.factor)
            return
        self.mode = _SlowDown(s.factor, loop.ctx.device)

    def around_compute(self):
        return self.mode if self.mode is not None else contextlib.nullcontext()


class MarkIdle(Hook):
    """Installed by `show_idle` (and with a straggler): records `idle` from this rank's end of
    backward to the slowest data-parallel rank's (module docstring)."""

    def on_train_start(self, loop):
        self.rec, self.group = loop.rec, loop.ctx.group("dp")
        self.n = dist.get_world_size(self.group) if dist.is_initialized() else 1

    def after_backward(self, loop, step):
        if self.n == 1:
            return
        rec = self.rec
        ready = rec.now()
        device = rec.ctx.device  # NCCL takes only tensors on the rank's GPU
        every = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(self.n)]
        mine = torch.tensor([ready], dtype=torch.float64, device=device)
        with rec.untimed():  # bookkeeping: not timed, not counted
            dist.all_gather(every, mine, group=self.group)
        latest = max(float(t.item()) for t in every)
        if latest > ready:
            rec.event("compute", "idle", ready, latest)
