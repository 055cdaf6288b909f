"""Signals the command line turns into something a user can act on (no torch here: `plan` uses it).

- **SIGTERM and SIGHUP** (a shell's `kill`, a closed terminal, a scheduler ending a job) are,
  by default, instant death: no `finally` runs, so a launch cannot end its workers and a tour
  cannot write the runs that finished. `raise_on_termination` makes them raise `Terminated`
  (a `KeyboardInterrupt`, so every place that already handles Ctrl-C handles them the same
  way) in the main thread; the CLI then exits with 128 + the signal's number, as a shell
  reports a command a signal ended. (Workers die with their parent whatever the parent does:
  `runtime/lifeline.py`.)
- **SIGXFSZ**: a write past the file-size limit (`ulimit -f`) kills the process by default,
  mid-file. Ignored, the write fails with `OSError(EFBIG)` instead, which an atomic write turns
  into one line and an untouched old file (`mgpukit.files`).
"""
from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that every `finally` runs."""

    def __init__(self, signum: int):
        self.signum = signum
        self.signame = signal.Signals(signum).name
        super().__init__(self.signame)


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def raise_on_termination() -> dict:
    """Make SIGTERM and SIGHUP raise `Terminated` (main thread only; a signal the caller
    ignores, e.g. under `nohup`, stays ignored). Returns what it replaced, for `restore`."""
    if not _in_main_thread():
        return {}
    saved = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            saved[sig] = signal.signal(sig, _raise_terminated)
    return saved


def restore(saved: dict) -> None:
    """Put back the handlers `raise_on_termination` replaced."""
    for sig, handler in saved.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def ignore_file_size_limit() -> None:
    """SIGXFSZ ignored (main thread only; a no-op where it does not exist): a write past
    `ulimit -f` raises OSError(EFBIG) instead of killing the process mid-file."""
    sig = getattr(signal, "SIGXFSZ", None)
    if sig is not None and _in_main_thread():
        signal.signal(sig, signal.SIG_IGN)
