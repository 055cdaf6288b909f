"""The worker's view of its launch: rank, world size, mode, device, the launch's clock origin.

`launch` builds one `WorkerContext` per worker and passes it on; library code receives it
explicitly. `current()` exists for code written in a notebook cell, which is launched as a
plain function and has no other way to ask "which rank am I, in which mode?".
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerContext:
    rank: int
    world_size: int
    mode: str  # "cpu" | "gpu" | "emulated"
    profile: str | None
    device: torch.device
    t0: float  # parent's time.perf_counter() at launch; measured timelines count from here
    threads: int
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def is_emulated(self) -> bool:
        return self.mode == "emulated"


_current: WorkerContext | None = None


def set_current(ctx: WorkerContext | None) -> None:
    global _current
    _current = ctx


def current() -> WorkerContext:
    """The context of the launch this process is a worker of (raises outside a launch)."""
    if _current is None:
        raise RuntimeError("mgpukit.current() is only available inside a function run by mgpukit.launch().")
    return _current
