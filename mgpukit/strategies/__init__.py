"""Strategy families; importing this package registers every strategy (see registry.py).

    from mgpukit import strategies
    strategies.get("dp-bucketed"), strategies.available()
"""
from mgpukit.strategies import single  # noqa: F401
from mgpukit.strategies import data_parallel  # noqa: F401
from mgpukit.strategies import communication  # noqa: F401
from mgpukit.strategies import compression  # noqa: F401
from mgpukit.strategies import pipeline  # noqa: F401
from mgpukit.strategies import tensor_parallel  # noqa: F401
from mgpukit.strategies import sharding  # noqa: F401
from mgpukit.strategies import hybrid  # noqa: F401
from mgpukit.strategies import context_parallel  # noqa: F401
from mgpukit.strategies import expert_parallel  # noqa: F401
from mgpukit.strategies.registry import Strategy, available, get, register  # noqa: F401

__all__ = ["get", "available", "register", "Strategy"]
