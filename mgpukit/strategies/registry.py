"""The strategy registry: what `mgpukit list` shows and `mgpukit run NAME` runs.

A strategy is a worker function `run(ctx, rec, cfg) -> dict | None` executed on every rank,
plus how it lays out the workers (`dims(world_size) -> ParallelDims`). It trains with the
recorder `rec` (every timed region and collective goes through it) and returns, from rank 0,
`{"weights": full unsharded state dict}` so the parent can check parity with `single`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mgpukit.runtime.dims import ParallelDims


@dataclasses.dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    family: str
    description: str
    run: Callable
    dims: Callable[[int], ParallelDims] = lambda n: ParallelDims(dp=n)
    min_workers: int = 1
    default_workers: int = 2
    reference: str | None = "single"  # what parity compares against (None: no parity)
    theory: Callable | None = None  # (cfg, dims) -> dict of predicted figures
    validate: Callable | None = None  # (cfg, dims) -> None; raises ValueError saying what to change
    batch_ranks: Callable[[int], int] | None = None  # world size -> ranks the batch is split
    # over (default: the dp degree; a parameter server splits it over its n-1 workers)
    tolerance: dict | None = None  # parity tolerance when fp32 defaults can't hold (say why)
    compare: Callable | None = None  # (record, weights, ref, tolerance) -> parity dict, for
    # strategies that change the numbers on purpose (lossy compression compares loss curves)
    emulation: bool = True  # runs under the virtual clock
    models: tuple[str, ...] = ("gpt-tiny", "gpt-small", "mlp-tiny", "mlp-wide")


_REGISTRY: dict[str, Strategy] = {}


def register(name: str, **fields) -> Callable:
    """Decorator: `@register("ddp", family=..., description=...)` on the worker function."""

    def wrap(fn):
        if name in _REGISTRY:
            raise ValueError(f"strategy {name!r} is registered twice.")
        _REGISTRY[name] = Strategy(name=name, run=fn, **fields)
        return fn

    return wrap


def _load_all():
    import mgpukit.strategies  # noqa: F401  (importing the package registers every family)


def get(name: str) -> Strategy:
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"unknown strategy {name!r}; `mgpukit list` shows these: "
                         f"{', '.join(sorted(_REGISTRY))}.")
    return _REGISTRY[name]


def available() -> list[Strategy]:
    _load_all()
    return list(_REGISTRY.values())
