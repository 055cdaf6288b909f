"""The one trainer and what it is built from.

- `building`  model, optimizer, batches, loss — the same for the reference and every layout
- `parts`     the seams: `Parts(module, engine, sync)`, `GradSync`, `NoSync`, the `Engine` protocol
- `holding`   what a rank holds of the full model (replicated, tp-split, sharded), as declared
- `checkpoint` save and resume through torch.distributed.checkpoint, any layout to any layout
- `local`     the engine of a whole-model replica (gradient accumulation over micro-batches)
- `trainer`   `train(ctx, rec, cfg, parts, optimizer)`: the loop, logging, memory, weights
- `loader`, `straggler`, `hetero`, `backup`, `lr_scaling`  the knobs the loop reads from
  `cfg.options` (`backup`: `drop_slowest`, the slowest ranks skip their compute)
"""
from mgpukit.training.parts import GradSync, NoSync, Parts
from mgpukit.training.trainer import Checkpointing, train

__all__ = ["train", "Checkpointing", "Parts", "GradSync", "NoSync"]
