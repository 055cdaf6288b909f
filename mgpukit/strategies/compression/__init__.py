"""Gradient compression: data parallelism that sends fewer bytes per step than fp32.

One module per idea, each a registered strategy (`family="compression"`), each a gradient-sync
applier on the dp axis:

- `half`      `dp-fp16`, `dp-bf16` — cast to 16 bits for the all-reduce (2×)
- `int8`      `dp-int8` — 8-bit codes + a scale per chunk, all-gathered (~4× on 2 workers)
- `topk`      `dp-topk` — the largest 1 % per tensor + error feedback, all-gathered (~50× on 2)
- `powersgd`  `dp-powersgd` — torch's PowerSGD DDP comm hook, its all-reduces recorded

`common` holds the shared sync (flat gradient -> exchange -> mean), `theory` the predicted
bytes and times, `parity` how lossy methods are compared with the fp32 reference (loss
curves, stated relative tolerance).
"""
from mgpukit.strategies.compression import half, int8, powersgd, topk  # noqa: F401  (registers)
from mgpukit.strategies.compression.parity import loss_parity  # noqa: F401
