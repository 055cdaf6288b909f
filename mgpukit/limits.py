"""The kit's stated limits on what one launch may ask — seconds, threads, workers — checked in
one place, before anything forks, by the CLI's argument types and by the Python API alike.

Why limits at all: a value far outside them is a typo, and it used to fail late and badly.
`--timeout 1e300` overflowed `datetime.timedelta` after the workers were forked; `1e-9` timed
the rendezvous out and printed 21 lines of c10d's stack; `threads_per_worker=0` failed inside
every rank; `launch(fn, 1000)` forked a thousand processes. The bounds:

- **seconds** (`timeout_s`, `collective_timeout_s`): from 1 s — starting a launch takes about
  that, and c10d counts its timeouts in whole milliseconds — to a week, far beyond any run of
  the kit (a real-scale model on CPU workers takes minutes per step) and inside what
  `datetime.timedelta` and c10d's millisecond counters hold.
- **threads per worker**: 1 to `MAX_THREADS`. More intra-op threads than the machine has cores
  only makes them take turns; the bound stops a typo before OpenMP tries to make a million.
- **workers per launch**: at most `MAX_WORKERS`, and on CPU workers (cpu and emulated modes: every
  rank is a process of this machine) no more than this machine's memory can hold at
  `WORKER_FLOOR_BYTES` each — a floor, far below what a worker really uses (~0.3 GB here), so
  a run that fits is never refused. Gloo connects every pair of ranks: each worker holds
  ``n - 1`` sockets, and the default limit of open files per process is 1,024.

No torch here: `mgpukit plan` and the CLI's argument types import it.
"""
from __future__ import annotations

import math

MIN_SECONDS = 1.0
MAX_SECONDS = 7 * 24 * 3600.0  # a week
MAX_THREADS = 1024
MAX_WORKERS = 256
# a forked worker's own pages at the least (interpreter state, gloo's buffers, its first step's
# allocations): far below the ~0.3-0.5 GB a worker really uses (training/resources.py)
WORKER_FLOOR_BYTES = 64 * 2**20


def seconds_problem(value) -> str | None:
    """What is wrong with `value` as a timeout in seconds (the end of a sentence), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number of seconds, got {type(value).__name__} {value!r}"
    if not math.isfinite(value) or not MIN_SECONDS <= value <= MAX_SECONDS:
        return (f"must be between {MIN_SECONDS:g} s and {MAX_SECONDS:g} s (a week); "
                f"got {value:g}")
    return None


def check_seconds(name: str, value) -> float:
    """`value` as a float, or ValueError naming `name` (module docstring: the bounds)."""
    if (problem := seconds_problem(value)) is not None:
        raise ValueError(f"{name}={value!r}: {problem}.")
    return float(value)


def check_threads(name: str, value) -> None:
    """None (the default rule) or a whole number in 1..MAX_THREADS; else ValueError."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise ValueError(f"{name}={value!r}: give a whole number of intra-op threads from 1 to "
                         f"{MAX_THREADS} (or None: the cores divided among the workers).")


def check_workers(world_size: int, *, on_this_machine: bool, memory_bytes: float) -> None:
    """ValueError when `world_size` workers exceed `MAX_WORKERS`, or, when they are processes of
    this machine, its memory at `WORKER_FLOOR_BYTES` each (module docstring)."""
    if world_size > MAX_WORKERS:
        raise ValueError(f"world_size={world_size}: at most {MAX_WORKERS} workers per launch (gloo "
                         f"connects every pair of ranks; each worker is a process of this machine).")
    need = world_size * WORKER_FLOOR_BYTES
    if on_this_machine and need > memory_bytes:
        raise ValueError(f"world_size={world_size}: {world_size} workers need at least "
                         f"{need / 2**30:.1f} GiB ({WORKER_FLOOR_BYTES // 2**20} MiB each, at the very "
                         f"least) and this machine has {memory_bytes / 2**30:.1f} GiB; use fewer workers.")
