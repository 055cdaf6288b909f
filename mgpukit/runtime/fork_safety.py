"""What a forked worker inherits from the process that launched it, made safe to inherit.

`launch` (:mod:`mgpukit.runtime.launcher`) forks its workers from a notebook's process, which has
run torch, OpenMP and earlier launches before. Three things that process holds would break a child:

- **Its uncollected garbage** (launcher docstring, 5.): C++ objects that own threads which do not
  exist in the child; freed by the child's collector, their destructor joins a dead thread (a hang,
  or SIGABRT). Every object a worker inherits is frozen right after the fork (`gc.freeze`), only
  for forks made by a launch.
- **OpenMP's thread pool**: GNU OpenMP is not fork-safe; `_release_openmp_threads` releases the
  pool before the fork (OpenMP 5.0 `omp_pause_resource_all`).
- **Signal handlers**: torch-elastic's `start_processes` replaces the caller's SIGINT/SIGTERM
  handlers and leaves them; `_callers_signal_handlers` puts the caller's back.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import threading

_FORKING_WORKERS = threading.Event()


def _freeze_in_child() -> None:
    if _FORKING_WORKERS.is_set():
        gc.freeze()  # module docstring, 5.


os.register_at_fork(after_in_child=_freeze_in_child)


@contextlib.contextmanager
def _freezing_inherited_objects():
    """While the workers are forked, each one freezes what it inherited (module docstring, 5.)."""
    _FORKING_WORKERS.set()
    try:
        yield
    finally:
        _FORKING_WORKERS.clear()


_ELASTIC_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # what elastic's start() takes over


@contextlib.contextmanager
def _callers_signal_handlers():
    """Give the caller its own signal handlers back once the workers are started.

    torch-elastic's `start_processes` installs handlers that turn SIGINT/SIGTERM into its
    `SignalException` — an ordinary `Exception` — and leaves them installed: after one launch,
    Ctrl-C in a notebook or a tour was swallowed by any `except Exception`. Restored here, a
    Ctrl-C during (or after) a launch raises `KeyboardInterrupt` as usual, and the launch's
    `finally` ends every worker.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # elastic installs nothing outside the main thread either
        return
    sigs = [getattr(signal, name) for name in _ELASTIC_SIGNALS if hasattr(signal, name)]
    saved = {sig: signal.getsignal(sig) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed from C, cannot be put back from Python
                signal.signal(sig, handler)


def _release_openmp_threads() -> None:
    """Let a forked worker use OpenMP although the parent already did.

    GNU OpenMP is not fork-safe: a child forked after the parent ran a parallel region (any
    multi-threaded torch op in the notebook) hangs in its own first parallel region, forever.
    OpenMP 5.0's `omp_pause_resource_all(omp_pause_hard)` releases the parent's thread pool
    before the fork; the parent's next parallel op simply starts a new one.
    """
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "libgomp" in line or "libiomp" in line})
    except OSError:
        return
    for path in libs:
        try:
            pause = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        pause.argtypes = [ctypes.c_int]
        pause(2)  # omp_pause_hard
