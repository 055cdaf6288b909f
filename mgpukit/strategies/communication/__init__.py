"""Communication: collectives written from send/recv (naive, ring, halving-doubling) against the
backend's, bus bandwidth and the alpha-beta fit, and the parameter server (sync and async).

- `collectives`   naive / ring / halving-doubling all-reduce, ring reduce-scatter and all-gather
- `bandwidth`     `measure_bandwidth`, `compare_bandwidth`, `fit_alpha_beta` (nccl-tests' busbw)
- `param_server`  strategies `ps-sync` and `ps-async` (bounded staleness)
- `ring_dp`       strategy `allreduce-ring`: data parallel over the hand-written ring
"""
from mgpukit.strategies.communication import param_server  # noqa: F401  (registers)
from mgpukit.strategies.communication import ring_dp  # noqa: F401  (registers)
