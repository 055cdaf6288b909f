"""Data parallelism: every rank holds the whole model and a slice of the batch."""
from mgpukit.strategies.data_parallel import ddp  # noqa: F401  (registers)
