"""How many intra-op threads a CPU worker gets, and how its OpenMP threads wait.

**Why it matters.** torch's CPU kernels run on an OpenMP team. Between parallel regions GNU
OpenMP's threads *spin* for a while (`GOMP_SPINCOUNT`, 300,000 turns — a few ms) before they
sleep. On a machine where anything else runs (a browser, a second notebook, seven colleagues),
a spinning thread burns the core its own team-mate, or another worker, needed: on this 2-core
machine with one core kept busy, a plain gpt-tiny step with 2 threads took 4.5 s (median; 2.3-6.0
s between quartiles) against 23.5 ms with `OMP_WAIT_POLICY=PASSIVE` (threads sleep at once) and
117 ms with 1 thread (load average 10-40 from other users besides).

**When it can be set.** libgomp reads `OMP_WAIT_POLICY` once, in its constructor, when torch
is first imported; setting it later — in a forked worker, or in a notebook that imported torch
first — changes nothing (measured: a child forked after `os.environ` was changed kept spinning).
So `import mgpukit` sets `OMP_WAIT_POLICY=PASSIVE` (unless the user chose a policy) *before*
anything imports torch, and notes whether OpenMP was already loaded by then.

**When it is too late.** If torch came first without the variable, the workers' OpenMP spins and
nothing in-process can change that; a worker then gets **one** intra-op thread — a team of one
has nobody to wait for, so nothing spins — and the record says why (`threads_note`). To get more:
start Python (or Jupyter) with `OMP_WAIT_POLICY=PASSIVE`, or `import mgpukit` before `torch`.

`spin_ms()` measures the policy in effect instead of trusting the environment: the CPU time
this process burns while it sleeps just after a parallel region (spinning: ms; passive: ~0).
"""
from __future__ import annotations

import functools
import os
import statistics
import time

ENV = "OMP_WAIT_POLICY"
_PASSIVE = "passive"


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime (GNU libgomp, LLVM libomp, Intel libiomp) is mapped already."""
    try:
        with open("/proc/self/maps") as f:
            return any(("libgomp" in line or "libomp" in line or "libiomp" in line) for line in f)
    except OSError:  # not Linux: we cannot tell, assume the worst
        return True


# Set when `mgpukit` is imported (mgpukit/__init__.py calls `set_before_torch` first thing).
_AT_IMPORT: dict = {}


def set_before_torch() -> None:
    """Ask for passive waiting while it can still take effect; remember whether it could."""
    if _AT_IMPORT:
        return
    _AT_IMPORT["openmp_loaded"] = _openmp_loaded()
    _AT_IMPORT["user_policy"] = os.environ.get(ENV)
    os.environ.setdefault(ENV, "PASSIVE")


def spin_ms(*, threads: int = 2, idle_s: float = 0.03, repeats: int = 5) -> float:
    """Measured: CPU milliseconds this process burns in `idle_s` of sleep right after a parallel
    region of `threads` OpenMP threads (the median of `repeats` tries). Spinning OpenMP burned
    2-6 ms there on this machine; passive waiting ~0.05 ms, up to ~0.8 ms in a single window
    when the machine is loaded (hence the median, and a threshold of 1 ms)."""
    # lazy: this module imports without torch (the parent, `mgpukit plan`)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.ones(1 << 21)  # 8 MB: well above ATen's grain size, so the op runs in parallel
        burnt = []
        for _ in range(repeats):
            x.mul_(1.0)
            start = time.process_time()
            time.sleep(idle_s)
            burnt.append(time.process_time() - start)
    finally:
        torch.set_num_threads(before)
    return 1e3 * statistics.median(burnt)


SPIN_THRESHOLD_MS = 1.0  # between passive (~0.05 ms, 0.8 at worst under load) and spinning (2-6 ms)


@functools.cache
def waits_passively() -> bool:
    """Whether this process's OpenMP threads sleep (rather than spin) when they wait.

    Known without measuring when OpenMP was loaded after `import mgpukit` set the policy (the
    environment decided it); measured with `spin_ms` when torch came first."""
    set_before_torch()
    if not _AT_IMPORT["openmp_loaded"]:
        return os.environ.get(ENV, "").lower() == _PASSIVE
    return spin_ms() < SPIN_THRESHOLD_MS


def worker_threads(world_size: int, requested: int | None = None, *, cores: int) -> tuple[int, str | None]:
    """Intra-op threads per CPU worker, and a note when the choice was forced.

    `requested` wins. Otherwise `cores // world_size` (each worker its share of the cores) when
    OpenMP waits passively, and 1 when it spins (module docstring)."""
    if requested is not None:
        return requested, None
    share = max(1, cores // world_size)
    if share == 1 or waits_passively():
        return share, None
    return 1, f"each worker gets 1 intra-op thread instead of {share}: {spin_note()}"


def spin_note() -> str:
    """Why this process's OpenMP spins, and what to do about it."""
    chosen = _AT_IMPORT.get("user_policy")
    cause = (f"{ENV}={chosen} was set before mgpukit was imported" if chosen and
             chosen.lower() != _PASSIVE else
             f"torch was imported before mgpukit, without {ENV}=PASSIVE")
    return (f"OpenMP spin-waits in this process ({cause}), and spinning threads inflate steps many "
            f"times over when anything else runs. Import mgpukit before torch, or start "
            f"Python/Jupyter with {ENV}=PASSIVE.")


def policy() -> dict:
    """What the record says about threads (`record["threads"]`): how OpenMP waits, how that is
    known, and why a worker got fewer threads than its share of the cores."""
    set_before_torch()
    passive = waits_passively()
    out = {"omp_waits": "passive" if passive else "spin",
           "known_from": ("the environment, set before OpenMP loaded" if not _AT_IMPORT["openmp_loaded"]
                          else "measured (threads.spin_ms): OpenMP loaded before mgpukit"),
           ENV: os.environ.get(ENV)}
    if not passive:
        out["note"] = spin_note()
    return out
