"""The `Clock` protocol: what the recorder, the allocator meter and the collective observer read
of a rank's clock — the wall clock of a measured run (`wallclock.WallClock`) or the virtual
clock of an emulated one (`vclock.VirtualClock`). Both declare every member, so nothing asks
a clock what it is with `getattr`; `emulated` says which one it is where the two differ.

    now()         seconds since the launch began (host time; virtual: the compute stream's)
    mark()        "here", in stream order: seconds, or a CUDA event read at the next `sync()`
    sync()        a step boundary (GPU: the one device synchronisation per step); virtual: none
    counting()    a compute region: the ops inside advance a virtual clock (wall: nothing)
    paused()      bookkeeping: ops inside do not advance it (wall: nothing)
    emulated      True for the virtual clock
    profile       the hardware profile the virtual clock prices ops with (wall: None)
    launches      a host issues kernels onto a device stream (an emulated GPU profile), and
    host          when that host can issue its next op (a `host` stream on the timeline)
    waits         (start, end) of waits inside compute regions, drawn as "wait" events (wall: None)
    split         where the virtual time went — kernel, launch_wait, wait, host (wall: None)
"""
from __future__ import annotations

import contextlib
from typing import Any, Protocol


class Clock(Protocol):
    emulated: bool
    profile: Any  # costmodel.hardware.HardwareProfile | None
    launches: bool
    waits: list[tuple[float, float]] | None
    split: dict[str, float] | None

    @property
    def host(self) -> float: ...

    def now(self) -> float: ...

    def mark(self) -> Any: ...

    def sync(self) -> None: ...

    def counting(self) -> contextlib.AbstractContextManager: ...

    def paused(self) -> contextlib.AbstractContextManager: ...
