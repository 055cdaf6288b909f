"""`Recorder`: one per rank; every timed region and every collective of a strategy goes through it.

A strategy calls `rec.compute("fwd")`, `rec.all_reduce(t)`, `rec.send(t, dst)` … instead of the
bare torch.distributed calls. The recorder runs the real operation (the data always moves, so
correctness is real) and writes down what it cost:

- a timeline event `{rank, stream, kind, microbatch, stage, step, start, end}`,
- bytes sent and received per rank, and a count per collective,
- the time, from the rank's clock: `WallClock` when measured, `VirtualClock` when emulated
  (see `mgpukit.measure.vclock`): the same strategy code gives a measured or an emulated
  timeline depending only on the clock it was handed.

Bytes are counted as the ring algorithm moves them per rank ("bus bytes"): all-reduce
2(n-1)/n·B, reduce-scatter and all-gather (n-1)/n·B, point-to-point B. `payload_bytes` counts
the tensors handed to the backend — what compression shrinks.
"""
from __future__ import annotations

import contextlib
import time
from collections import Counter

import torch
import torch.distributed as dist

from mgpukit.costmodel.comm import bus_factor
from mgpukit.runtime.context import WorkerContext


class WallClock:
    """Measured time: seconds since the launch began (the parent's perf_counter origin).

    On GPUs the clock synchronises the device before reading, so an event's end is when its
    kernels finished, not when they were queued. That costs overlap; it buys honest numbers.
    """

    emulated = False

    def __init__(self, t0: float, device: torch.device):
        self.t0 = t0
        self.sync = device.type == "cuda"

    def now(self) -> float:
        if self.sync:
            torch.cuda.synchronize()
        return time.perf_counter() - self.t0

    def counting(self):
        return contextlib.nullcontext()

    def paused(self):
        return contextlib.nullcontext()


class Handle:
    """What an async collective returns: `wait()` finishes it (and records its end)."""

    def __init__(self, work, on_done):
        self._work, self._on_done, self._done = work, on_done, False

    def wait(self):
        if not self._done:
            if self._work is not None:
                self._work.wait()
            self._done = True
            self._on_done()
        return None

    def get_future(self):
        return self._work.get_future()


def group_ranks(group) -> list[int]:
    if group is None:
        return list(range(dist.get_world_size()))
    return dist.get_process_group_ranks(group)


class Recorder:
    def __init__(self, ctx: WorkerContext, *, clock=None):
        self.ctx = ctx
        self.rank = ctx.rank
        self.clock = clock if clock is not None else make_clock(ctx)
        self.events: list[dict] = []
        self.step_times: list[float] = []
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        self.bytes_sent = 0.0
        self.bytes_received = 0.0
        self.payload_bytes = 0
        self.collectives: Counter = Counter()
        self.memory: dict = {}
        self.extra: dict = {}
        # False when a library moved the data itself (e.g. torch.distributed.pipelining):
        # the record then says "not counted" instead of showing a misleading zero
        self.comm_counted = True
        self._step: int | None = None
        self._pending: list[Handle] = []

    # ---- time --------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def event(self, stream: str, kind: str, start: float, end: float, **fields):
        self.events.append({"rank": self.rank, "stream": stream, "kind": kind,
                            "microbatch": fields.get("microbatch"), "stage": fields.get("stage"),
                            "step": self._step, "start": start, "end": end})

    @contextlib.contextmanager
    def compute(self, kind: str, *, microbatch: int | None = None, stage: int | None = None):
        """A compute region (fwd, bwd, opt, …). Emulated: the ops inside advance the clock."""
        start = self.clock.now()
        with self.clock.counting():
            yield
        self.event("compute", kind, start, self.clock.now(), microbatch=microbatch, stage=stage)

    @contextlib.contextmanager
    def step(self, index: int):
        """One optimizer step; its duration becomes `step_time_s[index]`."""
        self._step = index
        start = self.clock.now()
        yield
        self.wait_all()
        self.step_times.append(self.clock.now() - start)
        self._step = None

    @contextlib.contextmanager
    def untimed(self):
        """Bookkeeping the run would not do on its own (gathering logs, weights, timestamps):
        not on the timeline, not on the virtual clock, its bytes not counted."""
        with self.clock.paused():
            yield

    def reduce_values(self, values, *, group, op: str = "sum") -> list[float]:
        """Reduce a list of Python floats over `group` (untimed bookkeeping; see `untimed`).

        The tensor is made on the context's device, so it can reach NCCL as well as gloo."""
        values = [float(v) for v in values]
        if group is None or dist.get_world_size(group) == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.ctx.device)
        with self.untimed():
            dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op], group=group)
        return t.cpu().tolist()

    def log(self, loss: float, grad_norm: float | None = None):
        self.losses.append(float(loss))
        if grad_norm is not None:
            self.grad_norms.append(float(grad_norm))

    # ---- communication ---------------------------------------------------------------------
    def _count(self, name: str, payload: int, sent: float, received: float):
        self.collectives[name] += 1
        self.payload_bytes += payload
        self.bytes_sent += sent
        self.bytes_received += received

    def _collective(self, name, run, nbytes: int, group, async_op: bool, factor: float):
        ranks = group_ranks(group)
        n = len(ranks)
        self._count(name, nbytes, factor * nbytes, factor * nbytes)
        if self.clock.emulated:
            with self.clock.paused():
                start, end = self.clock.collective(name, nbytes, ranks, group)
                work = run(async_op)
            self.event("comm", name, start, end)
            if not async_op:
                if work is not None:
                    work.wait()
                self.clock.join(end)
                return None
            handle = Handle(work, lambda: self.clock.join(end))
        else:
            start = self.clock.now()
            work = run(async_op)
            if not async_op:
                self.event("comm", name, start, self.clock.now())
                return None
            handle = Handle(work, lambda: self.event("comm", name, start, self.clock.now()))
        del n
        self._pending.append(handle)
        return handle

    def all_reduce(self, tensor, *, op=dist.ReduceOp.SUM, group=None, async_op=False):
        n = len(group_ranks(group))
        return self._collective(
            "all_reduce", lambda a: dist.all_reduce(tensor, op=op, group=group, async_op=a),
            _nbytes(tensor), group, async_op, bus_factor("all_reduce", n))

    def reduce_scatter(self, output, input, *, op=dist.ReduceOp.SUM, group=None, async_op=False):
        n = len(group_ranks(group))
        return self._collective(
            "reduce_scatter",
            lambda a: dist.reduce_scatter_tensor(output, input, op=op, group=group, async_op=a),
            _nbytes(input), group, async_op, bus_factor("reduce_scatter", n))

    def all_gather(self, output, input, *, group=None, async_op=False):
        n = len(group_ranks(group))
        return self._collective(
            "all_gather",
            lambda a: dist.all_gather_into_tensor(output, input, group=group, async_op=a),
            _nbytes(output), group, async_op, bus_factor("all_gather", n))

    def broadcast(self, tensor, src: int, *, group=None, async_op=False):
        n = len(group_ranks(group))
        return self._collective(
            "broadcast", lambda a: dist.broadcast(tensor, src, group=group, async_op=a),
            _nbytes(tensor), group, async_op, bus_factor("broadcast", n))

    def barrier(self, *, group=None):
        return self._collective("barrier", lambda a: dist.barrier(group=group, async_op=a),
                                0, group, False, 0.0)

    def send(self, tensor, dst: int, *, group=None):
        self.isend(tensor, dst, group=group).wait()

    def recv(self, tensor, src: int, *, group=None):
        self.irecv(tensor, src, group=group).wait()

    def isend(self, tensor, dst: int, *, group=None) -> Handle:
        """Point-to-point send (global ranks). Emulated: the send time travels with the data."""
        nbytes = _nbytes(tensor)
        self._count("send", nbytes, nbytes, 0)
        if self.clock.emulated:
            with self.clock.paused():
                start, arrival = self.clock.send_times(nbytes, dst)
                stamp = torch.tensor([start], dtype=torch.float64)
                works = [dist.isend(stamp, dst, group=group), dist.isend(tensor, dst, group=group)]
            self.event("comm", "send", start, arrival)
            handle = Handle(_Works(works), lambda: self.clock.join(arrival))
        else:
            start = self.clock.now()
            work = dist.isend(tensor, dst, group=group)
            handle = Handle(work, lambda: self.event("comm", "send", start, self.clock.now()))
        self._pending.append(handle)
        return handle

    def irecv(self, tensor, src: int, *, group=None) -> Handle:
        nbytes = _nbytes(tensor)
        self._count("recv", nbytes, 0, nbytes)
        if self.clock.emulated:
            with self.clock.paused():
                stamp = torch.zeros(1, dtype=torch.float64)
                works = [dist.irecv(stamp, src, group=group), dist.irecv(tensor, src, group=group)]

            def done():
                start = self.clock.now()
                arrival = self.clock.arrival(float(stamp.item()), nbytes, src)
                self.clock.join(arrival)
                self.event("comm", "recv", start, max(start, arrival))

            handle = Handle(_Works(works), done)
        else:
            start = self.clock.now()
            work = dist.irecv(tensor, src, group=group)
            handle = Handle(work, lambda: self.event("comm", "recv", start, self.clock.now()))
        self._pending.append(handle)
        return handle

    def wait_all(self):
        """Finish every outstanding async operation (DDP does this at the end of backward)."""
        pending, self._pending = self._pending, []
        for handle in pending:
            handle.wait()

    # ---- result ------------------------------------------------------------------------------
    def result(self) -> dict:
        """This rank's part of the result record."""
        return {
            "rank": self.rank,
            "losses": self.losses,
            "grad_norms": self.grad_norms,
            "step_time_s": self.step_times,
            "timeline": self.events,
            "memory": self.memory,
            "comm": {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                     "payload_bytes": self.payload_bytes, "collectives": dict(self.collectives)}
            if self.comm_counted else None,
            "extra": self.extra,
        }


class _Works:
    """Several works finished together (the timestamp and the payload of an emulated send)."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def make_clock(ctx: WorkerContext):
    """The clock for this worker's mode: wall clock, or the virtual clock of its profile."""
    if ctx.is_emulated:
        from mgpukit.measure.vclock import VirtualClock

        return VirtualClock.for_context(ctx)
    return WallClock(ctx.t0, ctx.device)
