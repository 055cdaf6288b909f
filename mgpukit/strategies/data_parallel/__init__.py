"""Data parallelism: every rank holds the whole model and a slice of the batch.

- `naive.py`     `dp-naive`: all-reduce every gradient after backward
- `bucketed.py`  `dp-bucketed`: buckets all-reduced during backward (gradient hooks)
- `ddp.py`       `ddp`: torch DistributedDataParallel through Accelerate
- `loop.py`      the shared loop: gradient accumulation (`no_sync`), data, straggler, LR rule
- `loader.py`, `straggler.py`, `lr_scaling.py`  the knobs that loop reads from `cfg.options`
- `theory.py`    predicted bytes, memory and speedup; `studies.py` the notebook's experiments
"""
from mgpukit.strategies.data_parallel import bucketed, ddp, naive  # noqa: F401  (registers)
