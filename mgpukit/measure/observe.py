"""`CommObserver`: count and time the communication that libraries issue on their own.

DDP's reducer, ``torch.distributed.pipelining``, FSDP2 (``fully_shard``) and DTensor tensor
parallelism (``parallelize_module``) move data without calling the kit's ``Recorder``. They
all end up in the PyTorch dispatcher, though: ``dist.all_reduce`` is the op
``c10d.allreduce_``, ``dist.isend`` is ``c10d.send``, DTensor's redistributions are
functional collectives (``_c10d_functional.all_reduce`` …, finished by ``wait_tensor``), and
even DDP's C++ reducer calls ``ProcessGroup::allreduce``, which dispatches ``c10d.allreduce_``.
A ``TorchDispatchMode`` active in the worker therefore sees every one of them (checked on torch
2.13, gloo: ``research/README.md`` in the repository).

While active, the observer hands each collective and point-to-point op to a *sink* — the
``Recorder`` — exactly as the recorder's own methods would have:

- ``sink._count(name, payload, sent, received)``: ``name`` is the recorder's
  (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``barrier``, ``send``,
  ``recv``, ``all_to_all``, …), ``payload`` the bytes handed to the backend (all-reduce: the
  tensor; all-gather: the gathered output; reduce-scatter: the full input), ``sent`` /
  ``received`` the ring "bus bytes": all-reduce 2(n-1)/n·B, all-gather, reduce-scatter,
  broadcast, all-to-all (n-1)/n·B, send B out, recv B in; ``n`` is the op's process group size.
- ``sink.event("comm", name, start, end)`` with times from the sink's clock (``sink.now()``).

**Its price.** A Python dispatch mode runs *every* op through Python while it is active, not
only the collectives: around a whole `torch.distributed.pipelining` step it took pp-native-1f1b
from 96 to 180-210 ms per step (gpt-tiny, 4 CPU workers, m=8). Measured runs therefore keep
it away from compute (the native pipelines count their messages from the ops
``PipelineStage`` hands its schedule instead); it is the tool for emulated and shape-mode runs,
where time is virtual, and for counting what a library sends.

**Measured mode** (wall clock). ``start`` is when the op was issued; ``end`` is when it
completed: the ``Work``'s future where the backend has one (gloo: all-reduce, all-gather,
broadcast, barrier — the callback runs on the backend's thread the moment the op finishes, so
DDP's reducer, which waits in C++, is timed too), else the moment Python's ``Work.wait()``
returns (gloo send/recv and reduce-scatter have no future; pipelining and FSDP2 wait in
Python), else, for functional collectives, when ``wait_tensor`` runs or an op first touches the
``AsyncCollectiveTensor`` holding the result. An op none of these reach is counted but gets no
event (``observer.untimed``). On GPUs the end of a future-timed op is when the backend marked
it done, not when its kernel finished: pass ``use_futures=False`` there (waits only).

**Emulated mode** (the sink's clock is a ``VirtualClock``). A collective is charged like
``Recorder._collective``: ``clock.collective(name, nbytes, ranks, group)`` (the group's ranks
exchange ready times — that exchange is the observer's own and is not counted), its event
goes on the timeline at once, the tensors it writes are *pending* until its end (the first
compute op touching them joins the compute stream, as for DDP's reducer), and a
``Work.wait()`` joins the compute stream at its end. Point-to-point ops carry the sender's
time like ``Recorder.isend``/``irecv``: the observer sends a one-element timestamp just before
each observed send and receives it just before each observed receive (same group, same tag,
so the messages pair up in order); the receive joins the clock at ``sent + α + B/β`` when it
is waited in Python (``Work.wait()``) — a receive waited only in C++ is counted and drawn but
does not delay the receiver's clock. Collectives with no formula in ``vclock.collective_time``
are charged as one: all-to-all, gather, scatter as an all-gather; reduce as an all-reduce.

Nesting with the virtual clock's ``_CostMode`` (``clock.counting()``, entered by
``Recorder.compute``): either order works. The usual one is the observer entered once around
the whole training loop and ``_CostMode`` entered inside it per compute region, so
``_CostMode`` sees each op first (charges compute ops; charges c10d ops nothing) and passes it
down to the observer. A dispatch mode is per thread: enter the observer on the thread that
runs the training loop (autograd's CPU backward and DDP's hooks run there too).

**Not counting the recorder twice.** The recorder's own methods issue ``dist.*`` calls; they
must not be counted again. Wrap them in ``unobserved()`` (suspends every active observer in
this process; re-entrant), or ``observer.suspended()`` for one observer::

    with observe.unobserved():
        work = dist.all_reduce(tensor, group=group, async_op=True)

Wiring it into the kit (what the recorder and strategies need):

- ``Recorder._collective``, ``Recorder.isend``, ``Recorder.irecv``: run their bodies inside
  ``unobserved()`` (the payload op *and* the emulated ready-time / timestamp exchange);
  ``VirtualClock.collective``'s all_gather should be ``unobserved()`` too.
- Bookkeeping traffic that is not training (``_log_steps``' all-reduce, ``gather_weights``,
  the final barrier, ``launched.py``'s result gather): keep it outside the observer or inside
  ``unobserved()``.
- ``Recorder.wait_all`` (end of each step) should call ``observer.flush()``, so that
  future-timed events land inside their step (they are written from the backend's thread).
- Keep the observer active until the observed ops are waited: a Python wait seen after it
  exits does not end the op's event (it is counted in ``untimed`` instead).

Usage in a worker::

    rec = Recorder(ctx)
    with CommObserver(rec):
        for step in ...:
            with rec.step(step):
                with rec.compute("fwd_bwd"):
                    schedule.step(...)   # pipelining's sends and receives land in rec
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work, _resolve_process_group
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.utils._python_dispatch import TorchDispatchMode

from mgpukit.measure.comm_ops import (C10D, COST_AS, FUNCTIONAL, RECV_ANY_SOURCE, WAIT_TENSOR, bus_fraction,
                                     observed_ops, payload_bytes, tensors_in)

__all__ = ["CommObserver", "unobserved", "observed_ops"]


def _key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


# ---- Python-side waits: Work.wait is patched (class level) while an observer is active ----
_ACTIVE: list["CommObserver"] = []
_WAIT_HOOKS: dict[int, tuple] = {}  # id(work) -> (work, called after its wait, observer)
_ORIG_WAIT = Work.wait
_LOCK = threading.Lock()


def _wait(self, *args, **kwargs):
    out = _ORIG_WAIT(self, *args, **kwargs)
    entry = _WAIT_HOOKS.pop(id(self), None)
    if entry is not None and entry[0] is self:
        entry[1]()
    return out


def _install():
    with _LOCK:
        if Work.wait is not _wait:
            Work.wait = _wait


def _uninstall():
    with _LOCK:
        if not _ACTIVE:
            Work.wait = _ORIG_WAIT
            _WAIT_HOOKS.clear()


@contextlib.contextmanager
def unobserved():
    """Collectives issued inside are not seen by any active observer (the recorder's own)."""
    observers = list(_ACTIVE)
    for o in observers:
        o._suspended += 1
    try:
        yield
    finally:
        for o in observers:
            o._suspended -= 1


def _work_of(func, out) -> Work | None:
    boxed = out[1] if isinstance(out, (tuple, list)) else out
    try:
        return Work.unbox(boxed)
    except Exception:  # monitored_barrier returns nothing
        return None


class CommObserver(TorchDispatchMode):
    """Counts and times the collectives and point-to-point ops run while it is active.

    sink: has ``_count(name, payload, sent, received)``, ``event(stream, kind, start, end)``
    and ``now()`` (a ``Recorder``). clock: defaults to ``sink.clock``; a clock with
    ``emulated = True`` (``VirtualClock``) switches to emulated charging.
    use_futures: time ops that have a ``Work`` future by its completion (measured mode).
    """

    def __init__(self, sink, *, clock=None, use_futures: bool = True):
        super().__init__()
        self.sink = sink
        self.clock = clock if clock is not None else sink.clock  # a `measure.clock.Clock`
        self.emulated = self.clock.emulated
        self.use_futures = use_futures
        self.untimed = 0  # ops counted whose completion was never seen
        self.seen: dict[str, int] = {}  # op name -> count (what was observed, for reports)
        self._suspended = 0
        self._open: dict[int, tuple] = {}  # functional results: storage -> (name, start, end)
        self._futures: list = []  # completion callbacks still to run (measured mode)

    # ---- lifecycle ----------------------------------------------------------------------
    def __enter__(self):
        _ACTIVE.append(self)
        _install()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self.flush()
            _ACTIVE.remove(self)
            mine = [k for k, v in _WAIT_HOOKS.items() if v[2] is self]
            for k in mine:  # issued here, never waited in Python while observed
                del _WAIT_HOOKS[k]
            if not self.emulated:
                self.untimed += len(mine) + len(self._open)
            self._open.clear()
            _uninstall()

    def flush(self) -> None:
        """Wait until every future-timed op seen so far has written its event.

        A future's callback runs on the backend's thread, possibly just after the library's
        own wait returned (DDP's reducer): call this before reading the sink mid-run (e.g. at
        the end of a step); leaving the observer calls it."""
        futures, self._futures = self._futures, []
        for fut in futures:
            try:
                fut.wait()
            except Exception:  # the op itself failed: the library reports that
                pass

    @contextlib.contextmanager
    def suspended(self):
        """Ops run inside are not observed (re-entrant)."""
        self._suspended += 1
        try:
            yield
        finally:
            self._suspended -= 1

    def now(self) -> float:
        return self.sink.now()

    # ---- dispatch -----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._suspended:
            return func(*args, **kwargs)
        spec = C10D.get(func)
        if spec is not None:
            return self._c10d(func, spec, args, kwargs)
        spec = FUNCTIONAL.get(func)
        if spec is not None:
            return self._functional(func, spec, args, kwargs)
        if func is WAIT_TENSOR:
            out = func(*args, **kwargs)
            self._finish_functional(args[0])
            return out
        if self._open:
            self._touch(args, kwargs)
        return func(*args, **kwargs)

    def _record(self, name: str, payload: int, n: int):
        self.seen[name] = self.seen.get(name, 0) + 1
        if name == "send":
            self.sink._count(name, payload, payload, 0)
        elif name == "recv":
            self.sink._count(name, payload, 0, payload)
        else:
            bus = bus_fraction(name, n) * payload
            self.sink._count(name, payload, bus, bus)

    # ---- c10d ops (ProcessGroup calls, from Python or C++) ----------------------------------
    def _c10d(self, func, spec, args, kwargs):
        name, payload_of, written_of, pg_index = spec
        pg = ProcessGroup.unbox(args[pg_index])
        payload = payload_bytes(payload_of(args, None))
        self._record(name, payload, pg.size())
        if func is RECV_ANY_SOURCE:  # no peer known: counted, never charged
            if not self.emulated:
                start = self.now()
                out = func(*args, **kwargs)
                self._time_work(name, start, _work_of(func, out))
                return out
            self.untimed += 1
            return func(*args, **kwargs)
        if name in ("send", "recv"):
            return self._p2p(func, name, pg, payload, args, kwargs)
        ranks = dist.get_process_group_ranks(pg)
        if self.emulated:
            start, end = self._charge(name, payload, pg)
            with self.clock.paused():
                out = func(*args, **kwargs)
            self.clock._mark_pending(written_of(args, out), end)
            self.sink.event("comm", name, start, end, ranks=ranks)
            work = _work_of(func, out)
            if work is not None:
                _WAIT_HOOKS[id(work)] = (work, lambda: self.clock.join(end), self)
            return out
        start = self.now()
        out = func(*args, **kwargs)
        self._time_work(name, start, _work_of(func, out), ranks)
        return out

    def _time_work(self, name, start, work, ranks=None):
        """Measured: the event ends when the work completes (future) or is waited.
        `ranks`: the global ranks it ran among (marks an event that crossed nodes)."""
        def done(*_):
            self.sink.event("comm", name, start, self.now(), ranks=ranks)

        if work is None:
            done()
            return
        if self.use_futures:
            try:
                fut = work.get_future()
            except RuntimeError:  # gloo send/recv, reduce-scatter: no future
                fut = None
            if fut is not None:
                self._futures.append(fut.then(done))
                return
        _WAIT_HOOKS[id(work)] = (work, done, self)

    def _charge(self, name, nbytes, pg):
        """Emulated: (start, end) on the virtual clock; the ready-time exchange is unobserved."""
        ranks = dist.get_process_group_ranks(pg)
        with self.suspended(), self.clock.paused():
            start, end = self.clock.collective(COST_AS.get(name, name), nbytes, ranks, pg)
            self.clock._armed = None  # the observer marks what the op writes itself
        return start, end

    def _p2p(self, func, name, pg, nbytes, args, kwargs):
        peer_local, tag = args[2], args[3]
        peer = dist.get_global_rank(pg, peer_local)
        pair = (dist.get_rank(), peer)
        if not self.emulated:
            start = self.now()
            out = func(*args, **kwargs)
            self._time_work(name, start, _work_of(func, out), pair)
            return out
        clock = self.clock
        with self.suspended(), clock.paused():
            if name == "send":
                start, arrival = clock.send_times(nbytes, peer)
                stamp = torch.tensor([start], dtype=torch.float64)
                stamp_work = pg.send([stamp], peer_local, tag)
                out = func(*args, **kwargs)
            else:
                stamp = torch.zeros(1, dtype=torch.float64)
                stamp_work = pg.recv([stamp], peer_local, tag)
                out = func(*args, **kwargs)
        work = _work_of(func, out)
        if name == "send":
            self.sink.event("comm", "send", start, arrival, ranks=pair)

            def done():
                _ORIG_WAIT(stamp_work)
                clock.join(arrival)
        else:
            def done():
                _ORIG_WAIT(stamp_work)
                begin = clock.now()
                sent = float(stamp.item())
                arrival = clock.arrival(sent, nbytes, peer)
                clock.join(arrival)
                self.sink.event("comm", "recv", begin, max(begin, arrival), ranks=pair, wire_s=arrival - sent)
        if work is not None:
            _WAIT_HOOKS[id(work)] = (work, done, self)
        return out

    # ---- functional collectives (DTensor, funcol): result tensor, finished by wait_tensor ----
    def _functional(self, func, spec, args, kwargs):
        name, payload_of, written_of, pg_index = spec
        group = args[pg_index]
        pg = group if isinstance(group, ProcessGroup) else _resolve_process_group(group)
        payload = payload_bytes(payload_of(args, None))
        self._record(name, payload, pg.size())
        ranks = dist.get_process_group_ranks(pg)
        if self.emulated:
            start, end = self._charge(name, payload, pg)
            with self.clock.paused():
                out = func(*args, **kwargs)
            written = written_of(args, out)
            self.clock._mark_pending(written, end)
            self.sink.event("comm", name, start, end, ranks=ranks)
        else:
            start, end = self.now(), None
            out = func(*args, **kwargs)
            written = written_of(args, out)
        for t in tensors_in(written):
            k = _key(t)
            if k:
                self._open[k] = (name, start, end, ranks)
        return out

    def _finish_functional(self, t):
        entry = self._open.pop(_key(t), None) if isinstance(t, torch.Tensor) else None
        if entry is None:
            return
        name, start, end, ranks = entry
        if self.emulated:
            self.clock.join(end)
        else:
            self.sink.event("comm", name, start, self.now(), ranks=ranks)

    def _touch(self, args, kwargs):
        """An op reads an unfinished AsyncCollectiveTensor: wait for it here, so the wait is
        seen (otherwise it happens inside the tensor subclass, below this mode)."""
        for t in tensors_in((args, kwargs)):
            local = getattr(t, "_local_tensor", None)  # DTensor
            if local is not None:
                t = local
            if isinstance(t, AsyncCollectiveTensor):
                if not t.completed:
                    t.trigger_wait()
                self._finish_functional(t.elem)