"""Data parallelism: every rank holds the whole model and a slice of the batch.

Each strategy is a gradient-sync applier on the dp axis; the one trainer
(`mgpukit.training`) runs them, with gradient accumulation, the input pipeline, stragglers
and the learning-rate rule.

- `naive.py`     `dp-naive`: all-reduce every gradient after backward
- `bucketed.py`  `dp-bucketed`: buckets all-reduced during backward (gradient hooks)
- `ddp.py`       `ddp`: torch DistributedDataParallel through Accelerate
- `local_sgd.py`  `local-sgd`: H local steps, then an average of the weights (and Accelerate's LocalSGD)
- `theory.py`    predicted bytes, memory and speedup
"""
from mgpukit.strategies.data_parallel import bucketed, ddp, local_sgd, naive  # noqa: F401  (registers)
