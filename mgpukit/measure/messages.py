"""Point-to-point messages through the recorder: `send`, `recv`, `isend`, `irecv` and `exchange`.

The half of `mgpukit.measure.recorder.Recorder` that moves data between two ranks (pipeline
stages' activations and gradients, a ring's steps, a pair swap). Each message runs for real and
is counted (B bytes out for the sender, B in for the receiver) and timed like a collective:

- **measured**: from when it is posted to when its work completes (or the wait returns);
- **emulated**: the sender's clock time travels *beside* the payload as a one-element float64
  tensor, and the receiver's clock joins at ``sent + α + B/β`` (`VirtualClock.arrival`); in
  shape mode only that timestamp travels.

NCCL runs the unbatched messages between two ranks in order, so "isend, then irecv" on both
sides of a swap hangs on GPUs although gloo lets it pass: two ranks that send to and receive
from each other at once use `exchange`, one batch (`dist.batch_isend_irecv`). With
``strict_p2p`` on, `mgpukit.measure.p2p_strict` applies NCCL's rules on gloo, to catch on CPU
what would hang on GPUs.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from mgpukit.measure.shape import real
from mgpukit.measure.wallclock import Handle, Works


class Messages:
    """The recorder's point-to-point methods. A mixin: `Recorder` provides what they use —
    ``rank``, ``ctx``, ``clock``, ``shape``, ``_strict``, ``_pending``, ``_count``,
    ``_check_device``, ``_off_clock``, ``_mark`` and ``event``."""

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
                sent = _read(stamp)
                arrival = self.clock.arrival(sent, nbytes, src)
                self.clock.join(arrival)
                self.event("comm", "recv", start, max(start, arrival), ranks=(src, self.rank), wire_s=arrival - sent)

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

    def exchange(self, *, sends=(), recvs=(), group=None, waited_now: bool = False, axis=None) -> Handle:
        """Post sends `[(tensor, dst)]` and receives `[(tensor, src)]` together, as one batch
        (`dist.batch_isend_irecv`, as torch.distributed.pipelining does for each step).

        NCCL launches a batch as one grouped operation on the group's communicator, so a ring
        step (send right, receive left) or a pair swap cannot deadlock, and no per-pair
        communicator is created on the fly. The clock is read once for the whole batch; in
        emulated mode each message carries its send time beside it, as with `isend`/`irecv`.
        Empty tensors are skipped. `waited_now`: the caller waits at once (a ring step, a
        pipeline round), so the wait itself stamps the end — no watcher thread. `axis`: the mesh
        axis to count the bytes under, when the ranks alone cannot say (`Recorder._axis_of`)."""
        sends = [(t, p) for t, p in sends if t.numel()]
        recvs = [(t, p) for t, p in recvs if t.numel()]
        self._check_device("exchange", *(t for t, _ in sends + recvs))
        for t, dst in sends:
            self._count("send", _nbytes(t), _nbytes(t), 0, (self.rank, dst), axis)
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
                sent = _read(stamp)
                arrival = self.clock.arrival(sent, _nbytes(t), src)
                self.clock.join(arrival)
                self.event("comm", "recv", recv_start, max(recv_start, arrival), ranks=(src, self.rank),
                           wire_s=arrival - sent)

        if after_ready is not None:  # strict mode checks correctness, not time (see isend)
            ready = after_ready(work)
            self._strict.batch_posted(group, ready)  # its wait leaves the clocks alone
            handle = Handle(ready, done)
        else:
            handle = Handle(work, done, end=None if emulated or waited_now  # p2p: no future
                            else self.clock.completion(work, future=False))
        self._pending.append(handle)
        return handle


def _read(stamp: torch.Tensor) -> float:
    """A received timestamp's value (real, also in shape mode)."""
    with real():
        return float(stamp.item())


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
