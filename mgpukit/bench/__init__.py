"""Benchmarks: `mgpukit bench NAME`. Each compares ratios measured in one run (ours vs the
PyTorch built-in, measured vs theory) — absolute times on a shared machine are noise.

A benchmark is a function `(args) -> dict` registered with `@bench("name", help=...)`; it prints
its table and returns the figures (the tests call it with small settings)."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

BENCHES: dict[str, tuple[Callable, str]] = {}


def bench(name: str, *, help: str):
    def wrap(fn):
        BENCHES[name] = (fn, help)
        return fn

    return wrap


def load_all():
    """Import every benchmark module (each registers itself)."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
