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

Point-to-point messages (`send`, `recv`, `isend`, `irecv`, `exchange`) are the recorder's
too; their code is `mgpukit.measure.messages`'.
"""
from __future__ import annotations

import contextlib
from collections import Counter

import torch
import torch.distributed as dist

from mgpukit.costmodel.comm import bus_factor
from mgpukit.measure.messages import Messages
from mgpukit.measure.p2p_strict import StrictP2P
from mgpukit.measure.shape import real
from mgpukit.measure.wallclock import Handle, WallClock, make_clock
from mgpukit.runtime.context import WorkerContext

__all__ = ["Recorder", "Handle", "WallClock", "make_clock", "group_ranks"]


# torch 2.13 renamed the tensor collectives (the old names warn); older torch has only the old
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def group_ranks(group) -> list[int]:
    if group is None:
        return list(range(dist.get_world_size()))
    return dist.get_process_group_ranks(group)


class Recorder(Messages):
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
        return self.clock.mark()

    def _sync(self):
        self.clock.sync()

    def event(self, stream: str, kind: str, start, end, **fields):
        """A timeline event; `ranks=` (the global ranks of a communication) marks it
        `inter_node` when they sit on more than one node; `wire_s=` (an emulated receive) is the
        message's own time on the link, the rest of the event is the wait for it to be sent."""
        ev = {"rank": self.rank, "stream": stream, "kind": kind,
              "microbatch": fields.get("microbatch"), "stage": fields.get("stage"),
              "step": self._step, "start": start, "end": end}
        if fields.get("ranks") is not None and self.ctx.spans_nodes(fields["ranks"]):
            ev["inter_node"] = True
        if fields.get("wire_s") is not None:  # an emulated receive: the message's time on the link
            ev["wire_s"] = fields["wire_s"]
        self.events.append(ev)
        if not isinstance(start, float | int) or not isinstance(end, float | int):
            self._unresolved.append(ev)

    def _resolve(self):
        """CUDA marks -> seconds (after a sync: every recorded event has happened)."""
        for ev in self._unresolved:
            for k in ("start", "end"):
                if not isinstance(ev[k], float | int):  # a CUDA mark (`WallClock.mark`)
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
        waits = self.clock.waits
        first = len(waits) if waits is not None else 0
        host = self.clock.host if self.clock.launches else None
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
        split = dict(self.clock.split or {})  # emulated: where the time goes
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

    def _count(self, name: str, payload: int, sent: float, received: float, ranks=None, axis=None):
        self.collectives[name] += 1
        self.payload_bytes += payload
        self.bytes_sent += sent
        self.bytes_received += received
        if ranks is not None and sent:
            self.by_axis[axis or self._axis_of(ranks)] += sent

    def _axis_of(self, ranks) -> str:
        """The mesh axis a group of global ranks (or a message's two ends) lies on: the smallest
        axis group that holds them all (ties in the order tp, dp, cp, ep, dp_outer, pp). cp and
        ep are cut inside dp, so when one of them *is* the whole dp axis their own traffic
        cannot be told apart by its ranks: it passes `axis=` itself."""
        key = tuple(sorted(ranks))
        if key not in self._axes:
            ctx, members = self.ctx, set(key)
            inner = ("cp", "ep", "dp_outer") if ctx.size("cp") * ctx.size("ep") > 1 else ()
            axes = [a for a in ("tp", "dp", *inner, "pp")
                    if ctx.size(a) > 1 and members <= set(ctx.axis_ranks(a))]
            self._axes[key] = (min(axes, key=ctx.size) if axes else
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
                    written=None, axis=None):
        ranks = group_ranks(group)
        self._count(name, nbytes, factor * nbytes, factor * nbytes, ranks, axis)
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

    def all_to_all_single(self, output, input, *, group=None, async_op=False, axis=None):
        """Equal splits: chunk j of `input` (dim 0) goes to the group's rank j, chunk i of
        `output` comes from rank i (expert parallelism's dispatch and combine). Each rank sends
        (n-1)/n of its buffer — its own chunk stays — so it is counted like an all-gather."""
        self._check_device("all_to_all", output, input)
        n = len(group_ranks(group))
        return self._collective(
            "all_to_all",
            lambda a: dist.all_to_all_single(output, input, group=group, async_op=a),
            _nbytes(input), group, async_op, bus_factor("all_to_all", n), written=output, axis=axis)

    def barrier(self, *, group=None):
        return self._collective("barrier", lambda a: dist.barrier(group=group, async_op=a),
                                0, group, False, 0.0)

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


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
