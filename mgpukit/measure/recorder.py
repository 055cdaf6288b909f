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
the tensors handed to the backend — what compression shrinks. `by_axis` splits the bytes sent
by the mesh axis the group lies on ("tp", "dp", "pp"; "world" or "other" for any other group),
so a hybrid run's traffic per axis sits beside the cost model's (what a library issues itself,
counted through `CommObserver`, is not split by axis).

A communication event whose group crosses nodes (`ctx.spans_nodes`) carries
`"inter_node": True`: its bytes took the network, not the node's own links, and the timeline
colours it apart.

In shape mode (`mgpukit.measure.shape`: fake tensors, no data) a collective or a message moves
no payload; only its small real timestamps travel, so the timeline is the same as with data.
"""
from __future__ import annotations

import contextlib
from collections import Counter

import torch
import torch.distributed as dist

from mgpukit.costmodel.comm import bus_factor
from mgpukit.measure.p2p_strict import StrictP2P
from mgpukit.measure.shape import real
from mgpukit.measure.wallclock import Handle, WallClock, Works, make_clock
from mgpukit.runtime.context import WorkerContext

__all__ = ["Recorder", "Handle", "WallClock", "make_clock", "group_ranks"]


# torch 2.13 renamed the tensor collectives (the old names warn); older torch has only the old
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


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
        self.by_axis: Counter = Counter()  # bytes sent per mesh axis
        self._axes: dict[tuple, str] = {}
        self.memory: dict = {}
        self.extra: dict = {}
        self._step: int | None = None
        self._pending: list[Handle] = []
        self._unresolved: list[dict] = []  # events whose times are CUDA marks (GPU only)
        # NCCL's point-to-point rules on gloo, to catch on CPU what would hang on GPUs (p2p_strict.py)
        self._strict = StrictP2P(self.rank) if ctx.options.get("strict_p2p") else None
        # shape mode: fake tensors; payloads are not sent, timestamps are (module docstring)
        self.shape = bool(ctx.options.get("shape"))

    # ---- time --------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def _mark(self):
        mark = getattr(self.clock, "mark", None)  # the virtual clock's time is already in order
        return mark() if mark is not None else self.clock.now()

    def _sync(self):
        sync = getattr(self.clock, "sync", None)
        if sync is not None:
            sync()

    def event(self, stream: str, kind: str, start, end, **fields):
        """A timeline event; `ranks=` (the global ranks of a communication) marks it
        `inter_node` when they sit on more than one node."""
        ev = {"rank": self.rank, "stream": stream, "kind": kind,
              "microbatch": fields.get("microbatch"), "stage": fields.get("stage"),
              "step": self._step, "start": start, "end": end}
        if fields.get("ranks") is not None and self.ctx.spans_nodes(fields["ranks"]):
            ev["inter_node"] = True
        self.events.append(ev)
        if not isinstance(start, float | int) or not isinstance(end, float | int):
            self._unresolved.append(ev)

    def _resolve(self):
        """CUDA marks -> seconds (after a sync: every recorded event has happened)."""
        for ev in self._unresolved:
            for k in ("start", "end"):
                if hasattr(ev[k], "seconds"):
                    ev[k] = ev[k].seconds()
        self._unresolved = []

    @contextlib.contextmanager
    def compute(self, kind: str, *, microbatch: int | None = None, stage: int | None = None):
        """A compute region (fwd, bwd, opt, …). Emulated: the ops inside advance the clock.

        Emulated, the region's waits (a collective's output read inside backward, as DDP's
        reducer does with its last bucket) are drawn as "wait" events that cut the region, and
        on a GPU profile the host's share of the region (issuing its kernels) is drawn on the
        "host" stream as a "launch" event."""
        where = dict(microbatch=microbatch, stage=stage)
        start = self._mark()
        waits = getattr(self.clock, "waits", None)
        first = len(waits) if waits is not None else 0
        host = self.clock.host if getattr(self.clock, "launches", False) else None
        with self.clock.counting():
            yield
        end = self._mark()
        if host is not None:  # its own kind: whoever sums "bwd" bars sums the device's
            self.event("host", "launch", host, self.clock.host, **where)
        if not waits or len(waits) == first:
            self.event("compute", kind, start, end, **where)
            return
        mine, waits[first:] = waits[first:], []
        t = start
        for w_start, w_end in mine:
            if w_start > t:
                self.event("compute", kind, t, w_start, **where)
            self.event("compute", "wait", w_start, w_end, **where)
            t = w_end
        if end > t:
            self.event("compute", kind, t, end, **where)

    @contextlib.contextmanager
    def step(self, index: int):
        """One optimizer step; its duration becomes `step_time_s[index]`.

        The step's bounds are the only places a GPU run synchronises (`WallClock.sync`)."""
        self._step = index
        self._sync()
        start = self.clock.now()
        split = dict(getattr(self.clock, "split", None) or {})  # emulated: where the time goes
        yield
        self.wait_all()
        self._sync()
        self.step_times.append(self.clock.now() - start)
        self._resolve()  # bookkeeping (CUDA events -> seconds) after the step's time is taken
        if split:
            self.extra.setdefault("time_split", []).append(
                {"step_s": self.step_times[-1],
                 **{f"{k}_s": v - split[k] for k, v in self.clock.split.items()}})
        self._step = None

    @contextlib.contextmanager
    def untimed(self):
        """Bookkeeping the run would not do on its own (gathering logs, weights, timestamps):
        not on the timeline, not on the virtual clock, its bytes not counted."""
        with self._off_clock():
            yield

    @contextlib.contextmanager
    def _off_clock(self):
        """Clock paused; in shape mode also fake mode unset, so timestamps and bookkeeping
        tensors made here are real and can travel over the backend."""
        with self.clock.paused(), (real() if self.shape else contextlib.nullcontext()):
            yield

    def reduce_values(self, values, *, group, op: str = "sum") -> list[float]:
        """Reduce a list of Python floats over `group` (untimed bookkeeping; see `untimed`).

        The tensor is made on the context's device, so it can reach NCCL as well as gloo."""
        values = [float(v) for v in values]
        if group is None or dist.get_world_size(group) == 1:
            return values
        with self.untimed():
            t = torch.tensor(values, dtype=torch.float64, device=self.ctx.device)
            dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op], group=group)
        return t.cpu().tolist()

    def log(self, loss: float | None, grad_norm: float | None = None):
        """One step's loss (None in shape mode: fake tensors have no values)."""
        self.losses.append(None if loss is None else float(loss))
        if grad_norm is not None:
            self.grad_norms.append(float(grad_norm))

    # ---- communication ---------------------------------------------------------------------
    def count(self, name: str, payload: int, sent: float, received: float):
        """Count one operation someone else issued (a library's), as the recorder counts its own."""
        self._count(name, payload, sent, received)

    def _count(self, name: str, payload: int, sent: float, received: float, ranks=None):
        self.collectives[name] += 1
        self.payload_bytes += payload
        self.bytes_sent += sent
        self.bytes_received += received
        if ranks is not None and sent:
            self.by_axis[self._axis_of(ranks)] += sent

    def _axis_of(self, ranks) -> str:
        """The mesh axis a group of global ranks (or a message's two ends) lies on."""
        key = tuple(sorted(ranks))
        if key not in self._axes:
            ctx, members = self.ctx, set(key)
            axes = [a for a in ("tp", "dp", "pp") if ctx.size(a) > 1 and members <= set(ctx.axis_ranks(a))]
            self._axes[key] = (axes[0] if axes else
                               "world" if len(members) == ctx.world_size else "other")
        return self._axes[key]

    def _check_device(self, name: str, *tensors):
        """Every tensor handed to the backend lives on this rank's device: NCCL takes no CPU
        tensor, and a meta tensor is a factory call without `device=` (see `device_guard`)."""
        want = torch.device(self.ctx.device)
        for t in tensors:
            d = t.device
            if d.type != want.type or (d.index is not None and want.index is not None
                                       and d.type != "cpu" and d.index != want.index):
                hint = (" — made by a factory call without device= (caught by the device guard)"
                        if d.type == "meta" else "")
                raise RuntimeError(f"{name} on rank {self.rank}: a tensor on {d}, but this "
                                   f"rank's device is {want}{hint}. Create it with device=ctx.device.")

    def _collective(self, name, run, nbytes: int, group, async_op: bool, factor: float,
                    written=None):
        ranks = group_ranks(group)
        self._count(name, nbytes, factor * nbytes, factor * nbytes, ranks)
        if self.clock.emulated:
            with self._off_clock():
                start, end = self.clock.collective(name, nbytes, ranks, group)
                work = _NoWork(written) if self.shape else run(async_op)
            if self.shape and written is not None:  # no c10d op ran to mark it: mark it here
                self.clock._mark_pending(written, end)
            self.event("comm", name, start, end, ranks=ranks)
            if not async_op:
                if work is not None:
                    work.wait()
                self.clock.join(end)
                return None
            handle = Handle(work, lambda _: self.clock.join(end))
        else:
            start = self._mark()
            work = run(async_op)
            if not async_op:
                self.event("comm", name, start, self._mark(), ranks=ranks)
                return None
            handle = Handle(work, lambda t: self.event("comm", name, start, t, ranks=ranks),
                            end=self.clock.completion(work))
        self._pending.append(handle)
        return handle

    def all_reduce(self, tensor, *, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self._check_device("all_reduce", tensor)
        n = len(group_ranks(group))
        return self._collective(
            "all_reduce", lambda a: dist.all_reduce(tensor, op=op, group=group, async_op=a),
            _nbytes(tensor), group, async_op, bus_factor("all_reduce", n), written=tensor)

    def reduce_scatter(self, output, input, *, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self._check_device("reduce_scatter", output, input)
        n = len(group_ranks(group))
        return self._collective(
            "reduce_scatter",
            lambda a: _REDUCE_SCATTER(output, input, op=op, group=group, async_op=a),
            _nbytes(input), group, async_op, bus_factor("reduce_scatter", n), written=output)

    def all_gather(self, output, input, *, group=None, async_op=False):
        self._check_device("all_gather", output, input)
        n = len(group_ranks(group))
        return self._collective(
            "all_gather",
            lambda a: _ALL_GATHER(output, input, group=group, async_op=a),
            _nbytes(output), group, async_op, bus_factor("all_gather", n), written=output)

    def broadcast(self, tensor, src: int, *, group=None, async_op=False):
        self._check_device("broadcast", tensor)
        n = len(group_ranks(group))
        return self._collective(
            "broadcast", lambda a: dist.broadcast(tensor, src, group=group, async_op=a),
            _nbytes(tensor), group, async_op, bus_factor("broadcast", n), written=tensor)

    def barrier(self, *, group=None):
        return self._collective("barrier", lambda a: dist.barrier(group=group, async_op=a),
                                0, group, False, 0.0)

    def send(self, tensor, dst: int, *, group=None):
        self.isend(tensor, dst, group=group, waited_now=True).wait()

    def recv(self, tensor, src: int, *, group=None):
        self.irecv(tensor, src, group=group, waited_now=True).wait()

    def _stamp(self, value: float = 0.0) -> torch.Tensor:
        """The float64 timestamp an emulated message carries beside its payload."""
        return torch.tensor([value], dtype=torch.float64, device=self.ctx.device)

    def _comm_done(self, kind: str, start, peer: int):
        """on_done of a measured message: its event, ending when the work finished (or now)."""
        return lambda end: self.event("comm", kind, start, end if end is not None else self._mark(),
                                      ranks=(self.rank, peer))

    def isend(self, tensor, dst: int, *, group=None, waited_now: bool = False) -> Handle:
        """Point-to-point send (global ranks). Emulated: the send time travels with the data.

        Two ranks that send to and receive from each other at once (a ring step, a pair swap)
        should use `exchange`: NCCL runs unbatched messages between two ranks in order, so
        "isend, then irecv" on both sides waits forever on GPUs, although gloo lets it pass.
        `waited_now`: the caller waits at once (`send`), so the wait itself stamps the end —
        no watcher needed for the moment it completed."""
        self._check_device("send", tensor)
        nbytes = _nbytes(tensor)
        self._count("send", nbytes, nbytes, 0, (self.rank, dst))
        strict = self._strict
        if strict is not None:
            strict.before_unbatched(group, dst)
        if self.clock.emulated:
            with self._off_clock():
                start, arrival = self.clock.send_times(nbytes, dst)
                works = [dist.isend(self._stamp(start), dst, group=group)]
                if not self.shape:  # shape mode: the timestamp travels, the payload does not
                    works.append(dist.isend(tensor, dst, group=group))
            self.event("comm", "send", start, arrival, ranks=(self.rank, dst))
            work, on_done = Works(works), (lambda _: self.clock.join(arrival))
        else:
            start = self._mark()
            work, on_done = dist.isend(tensor, dst, group=group), self._comm_done("send", start, dst)
        if strict is not None:  # stamped at wait(): strict mode checks correctness, not time
            handle = Handle(strict.send(work, group, dst), on_done)
            strict.posted(group, dst, handle)
        else:
            end = None if self.clock.emulated or waited_now else self.clock.completion(work, future=False)
            handle = Handle(work, on_done, end=end)
        self._pending.append(handle)
        return handle

    def irecv(self, tensor, src: int, *, group=None, waited_now: bool = False) -> Handle:
        self._check_device("recv", tensor)
        nbytes = _nbytes(tensor)
        self._count("recv", nbytes, 0, nbytes)
        strict = self._strict
        if strict is not None:
            strict.before_unbatched(group, src)
            strict.recv_posted(group, src)
        if self.clock.emulated:
            with self._off_clock():
                stamp = self._stamp()
                works = [dist.irecv(stamp, src, group=group)]
                if not self.shape:
                    works.append(dist.irecv(tensor, src, group=group))

            def done(_):
                start = self.clock.now()
                arrival = self.clock.arrival(_read(stamp), nbytes, src)
                self.clock.join(arrival)
                self.event("comm", "recv", start, max(start, arrival), ranks=(src, self.rank))

            handle = Handle(Works(works), done)
        else:
            start = self._mark()
            work = dist.irecv(tensor, src, group=group)
            handle = Handle(work, self._comm_done("recv", start, src),
                            end=None if strict is not None or waited_now
                            else self.clock.completion(work, future=False))
        if strict is not None:
            strict.posted(group, src, handle)
        self._pending.append(handle)
        return handle

    def exchange(self, *, sends=(), recvs=(), group=None, waited_now: bool = False) -> Handle:
        """Post sends `[(tensor, dst)]` and receives `[(tensor, src)]` together, as one batch
        (`dist.batch_isend_irecv`, as torch.distributed.pipelining does for each step).

        NCCL launches a batch as one grouped operation on the group's communicator, so a ring
        step (send right, receive left) or a pair swap cannot deadlock, and no per-pair
        communicator is created on the fly. The clock is read once for the whole batch; in
        emulated mode each message carries its send time beside it, as with `isend`/`irecv`.
        Empty tensors are skipped. `waited_now`: the caller waits at once (a ring step, a
        pipeline round), so the wait itself stamps the end — no watcher thread."""
        sends = [(t, p) for t, p in sends if t.numel()]
        recvs = [(t, p) for t, p in recvs if t.numel()]
        self._check_device("exchange", *(t for t, _ in sends + recvs))
        for t, dst in sends:
            self._count("send", _nbytes(t), _nbytes(t), 0, (self.rank, dst))
        for t, _ in recvs:
            self._count("recv", _nbytes(t), 0, _nbytes(t))
        if not sends and not recvs:
            return Handle(None, lambda _: None)
        after_ready = self._strict.batch(group, sends, recvs) if self._strict is not None else None
        emulated = self.clock.emulated
        ops, stamps, arrivals = [], [], []
        payload = not self.shape  # shape mode: only the timestamps travel
        with self._off_clock():
            for t, dst in sends:
                if emulated:
                    start, arrival = self.clock.send_times(_nbytes(t), dst)
                    arrivals.append(arrival)
                    self.event("comm", "send", start, arrival, ranks=(self.rank, dst))
                    ops.append(dist.P2POp(dist.isend, self._stamp(start), dst, group=group))
                if payload:
                    ops.append(dist.P2POp(dist.isend, t, dst, group=group))
            for t, src in recvs:
                if emulated:
                    stamps.append(self._stamp())
                    ops.append(dist.P2POp(dist.irecv, stamps[-1], src, group=group))
                if payload:
                    ops.append(dist.P2POp(dist.irecv, t, src, group=group))
            start = None if emulated else self._mark()
            work = Works(dist.batch_isend_irecv(ops))

        def done(end):
            if not emulated:
                end = end if end is not None else self._mark()  # one clock read for the batch
                for kind, items in (("send", sends), ("recv", recvs)):
                    for _, peer in items:
                        self.event("comm", kind, start, end, ranks=(self.rank, peer))
                return
            for arrival in arrivals:  # the sends' handles, then the receives', as isend/irecv
                self.clock.join(arrival)
            recv_start = self.clock.now()
            for stamp, (t, src) in zip(stamps, recvs):
                arrival = self.clock.arrival(_read(stamp), _nbytes(t), src)
                self.clock.join(arrival)
                self.event("comm", "recv", recv_start, max(recv_start, arrival), ranks=(src, self.rank))

        if after_ready is not None:  # strict mode checks correctness, not time (see isend)
            ready = after_ready(work)
            self._strict.batch_posted(group, ready)  # its wait leaves the clocks alone
            handle = Handle(ready, done)
        else:
            handle = Handle(work, done, end=None if emulated or waited_now  # p2p: no future
                            else self.clock.completion(work, future=False))
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
        if self._unresolved:
            self._sync()
            self._resolve()
        return {
            "rank": self.rank,
            "node": self.ctx.node,
            "host": self.ctx.nodes.hosts[self.ctx.node] if self.ctx.nodes.hosts else None,
            "losses": self.losses,
            "grad_norms": self.grad_norms,
            "step_time_s": self.step_times,
            "threads": torch.get_num_threads(),  # intra-op threads this rank computed with
            "timeline": self.events,
            "memory": self.memory,
            "comm": {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                     "payload_bytes": self.payload_bytes, "collectives": dict(self.collectives),
                     "by_axis": dict(self.by_axis)},
            "extra": self.extra,
        }


class _NoWork:
    """The work of a shape-mode collective: nothing moved, already done. Its future holds the
    (fake) tensor, as a DDP comm hook's future must."""

    def __init__(self, tensor):
        self.tensor = tensor

    def wait(self, *args):
        return True

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result([self.tensor])
        return fut


def _read(stamp: torch.Tensor) -> float:
    """A received timestamp's value (real, also in shape mode)."""
    with real():
        return float(stamp.item())


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
