"""Which mode a run runs in — resolved once, then trusted.

``"auto"`` becomes ``"gpu"`` when at least as many GPUs as ranks are visible (NCCL wants one
rank per GPU), else ``"cpu"``; an explicit ``"gpu"`` is checked against the GPUs visible.
`resolve_mode` returns a `ResolvedMode` — a plain string that remembers it was checked — so
a run resolves its mode once, in `mgpukit.prepare`, and `launch` takes that one as it is (a
plain string, e.g. from `mgpukit.launch(fn, 2, mode="auto")`, is resolved by `launch`).
"""
from __future__ import annotations

from mgpukit.runtime.failures import LaunchError
from mgpukit.runtime.hardware import cuda_device_count, placement

MODES = ("auto", "cpu", "gpu", "emulated")


class ResolvedMode(str):
    """ "cpu" | "gpu" | "emulated", as `resolve_mode` returned it: compares, hashes and prints as
    the plain string (records hold the plain string: `str(mode)`)."""

    __slots__ = ()


def resolve_mode(mode: str, world_size: int) -> ResolvedMode:
    """"auto" -> "gpu" when at least `world_size` GPUs are visible, else "cpu"."""
    if isinstance(mode, ResolvedMode):
        return mode
    if mode not in MODES:
        raise LaunchError(f"mode={mode!r} is not one of {MODES}.")
    if mode == "auto":
        # the reason (too few GPUs: NCCL wants one rank per GPU) is the record's `placement`
        return ResolvedMode(placement(world_size, cuda_device_count())[0])
    if mode == "gpu" and cuda_device_count() < world_size:
        raise LaunchError(
            f"mode='gpu' needs {world_size} GPUs but {cuda_device_count()} are visible (NCCL "
            f"refuses two ranks on one GPU); use mode='cpu' (or 'auto'), mode='emulated', or "
            f"fewer workers."
        )
    return ResolvedMode(mode)
