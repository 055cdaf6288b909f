"""Hybrid 3D parallelism: data × tensor × pipeline parallel on one device mesh.

- `hybrid.py` the `hybrid` strategy: its default layout, its gradient sync over dp (one flat
  all-reduce, or ZeRO-1 with the tensor-parallel share of each shard's norm), its knobs
- `theory.py` what the cost model predicts for the run: bytes per axis, the bubble, memory

The composition itself is the core's (`mgpukit.parallelize`): Megatron layers on the tp axis,
then the policies, then the pipeline cut on the pp axis, then the dp sync — this package only
says which sync and which layout.
"""
from mgpukit.strategies.hybrid import hybrid  # noqa: F401  (registers)
