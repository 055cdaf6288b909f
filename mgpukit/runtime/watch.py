"""Watching a launch's workers until they all return, one fails, or the time is up.

torch-elastic's `PContext.wait` does this, but when a rank fails its process context sends
SIGTERM to the others and waits **30 s** for them before SIGKILL. A rank that cannot act on
SIGTERM — stopped (SIGSTOP, Ctrl-Z, a debugger) or stuck in native code — takes all 30, and
is then seen dead of SIGKILL: the exit code of the out-of-memory killer. A frozen rank made
`--collective-timeout 10` take 41 s, and the report blamed the OOM killer for a signal the
launch itself had sent.

So the launch reads the exit codes itself first, every `period`: once one rank has failed,
the others get `grace_s` to fail on their own (a peer gone, they usually do, and say why);
then whatever still lives is looked at — stopped, or running — and killed here with its
process group (SIGKILL reaches a stopped process), and the error names it as such
(`failures.worker_error(..., ended=...)`). Only then does torch collect the results, with no
one left to wait for. (A rank that fails in the microseconds between this check and torch's
own poll still meets torch's patience; it is then reported as before.)
"""
from __future__ import annotations

import time

import psutil

from mgpukit.runtime.lifeline import kill_groups


def wait(pc, timeout_s: float, *, grace_s: float = 2.0, period: float = 0.02):
    """(torch's `RunProcsResult` or None on timeout, {rank: state} of the ranks ended here)."""
    procs = getattr(getattr(pc, "_pc", None), "processes", None)
    if not procs:  # another torch: its own wait, with its own patience
        return pc.wait(timeout=timeout_s, period=period), {}
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if any(p.exitcode not in (None, 0) for p in procs):
            ended = _end_the_rest(procs, grace_s)  # first: torch then finds no one to wait for
            return pc.wait(timeout=10, period=period), ended
        result = pc.wait(timeout=0)  # collects the return values once every rank has sent its own
        if result is not None:
            return result, {}
        time.sleep(period)
    return None, {}


def _end_the_rest(procs, grace_s: float) -> dict[int, str]:
    """After a failure: wait up to `grace_s` for the others to exit, then kill (and name) those
    that did not."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.exitcode is None for p in procs):
        time.sleep(0.02)
    ended = {}
    for rank, p in enumerate(procs):
        if p.exitcode is None:
            try:
                ended[rank] = psutil.Process(p.pid).status()
            except psutil.Error:
                ended[rank] = "gone"
    kill_groups([procs[r].pid for r in ended])
    for r in ended:
        procs[r].join(5)
    return ended
