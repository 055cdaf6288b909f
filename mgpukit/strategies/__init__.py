"""Strategy families; importing this package registers every strategy (see registry.py)."""
from mgpukit.strategies import single  # noqa: F401
from mgpukit.strategies import data_parallel  # noqa: F401
from mgpukit.strategies import communication  # noqa: F401
from mgpukit.strategies import compression  # noqa: F401
from mgpukit.strategies import pipeline  # noqa: F401
