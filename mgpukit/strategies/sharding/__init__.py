"""Sharding: ZeRO stages 1-3 written from reduce-scatter and all-gather, and PyTorch's FSDP2.

Data parallelism keeps N copies of the model states (parameters, gradients, optimizer
states); sharding keeps 1/N of them per rank and communicates to rebuild what a step needs
(Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC'20). Each stage is a gradient-sync applier on the dp axis that also tells the
trainer which tensors the optimizer steps (this rank's shards; `Parts.params`):

- `flat.py`   flat, padded buffers per unit (a block …) and their shards: the data structure
- `zero1.py`  `zero1`: optimizer states sharded (reduce-scatter grads, all-gather params)
- `zero2.py`  `zero2`: + gradients sharded (reduce-scatter each block during backward)
- `zero3.py`  `zero3`: + parameters sharded (all-gather each block before use, free after)
- `fsdp2.py`  `fsdp2`: PyTorch's `fully_shard` per block then root (ZeRO-3 as torch ships it)
- `theory.py` predicted bytes per rank and bytes sent, from `mgpukit.costmodel`
"""
from mgpukit.strategies.sharding import fsdp2, zero1, zero2, zero3  # noqa: F401  (registers)
