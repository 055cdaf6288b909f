"""The one trainer and what it is built from.

- `building`  model, optimizer, batches, loss — the same for the reference and every layout
- `parts`     the seams: `Parts(module, engine, sync)`, `GradSync`, `NoSync`, the `Engine` protocol
- `holding`   what a rank holds of the full model (replicated, tp-split, sharded), as declared
- `checkpoint` save and resume through torch.distributed.checkpoint, any layout to any layout
- `local`     the engine of a whole-model replica (gradient accumulation over micro-batches)
- `trainer`   `train(ctx, rec, cfg, parts, optimizer, hooks=...)`: the loop, logging, memory, weights
- `hooks`     the `Hook` protocol: what an experiment adds around the loop, and `Checkpointing`
- `loader`    the input pipeline the loop reads batches from
- `batch_split` unequal rows per data-parallel rank, each loss weighted so the average stays exact
- `straggler`, `hetero`, `backup`, `lr_scaling`  hooks an experiment installs from the run's knobs
  (`backup`: `drop_slowest`, the slowest ranks skip their compute)
- `knob_hooks` the one place that turns those knobs into hooks (`hooks_for`) and refuses them
  (`check_knobs`): the core above names no lesson
"""
from mgpukit.training.hooks import Checkpointing, Hook, Loop
from mgpukit.training.parts import GradSync, NoSync, Parts
from mgpukit.training.trainer import train

__all__ = ["train", "Hook", "Loop", "Checkpointing", "Parts", "GradSync", "NoSync"]
