"""Large batches: the linear learning-rate scaling rule with gradual warmup (Goyal et al. 2017).

Adding data-parallel workers at a fixed batch per worker multiplies the global batch. With the
same learning rate, a step still moves the weights about as far as before, so n× the compute
buys little extra progress per step. Goyal et al. 2017 ("Accurate, Large Minibatch SGD:
Training ImageNet in 1 Hour", §2.1): *when the minibatch size is multiplied by k, multiply the
learning rate by k* — one step with k× the data and k× the rate ≈ k small steps, as long as
the gradient changes little over those k steps. That fails early in training, when weights
move fast, so §2.2 ramps the rate linearly from the base value to k× over the first epochs
("gradual warmup").

Knobs (in `RunConfig.options`; the experiment installs `LrSchedule` when one is set):

- `lr_scaling`: `"linear"` to apply the rule (absent / None: the rate stays `cfg.lr`);
- `warmup_steps`: steps of the linear ramp from `cfg.lr` to the scaled rate (0: none);
- `base_batch`: the global batch `cfg.lr` was tuned for (default: the batch of one worker,
  `global_batch / world_size`, so k = the number of workers).
"""
from __future__ import annotations

from collections.abc import Callable

from mgpukit.training.hooks import Hook


def scaled_lr(cfg, world_size: int) -> float:
    """The target rate of the linear scaling rule: `cfg.lr · global_batch / base_batch`."""
    base = cfg.options.get("base_batch") or cfg.global_batch // world_size
    return cfg.lr * cfg.global_batch / base


def lr_schedule(cfg, world_size: int) -> Callable[[int], float] | None:
    """`step -> learning rate`, or None when the run keeps `cfg.lr` (no scaling knob set)."""
    rule = cfg.options.get("lr_scaling")
    if rule in (None, "none", False):
        return None
    if rule != "linear":
        raise ValueError(f"lr_scaling={rule!r}: use 'linear' (Goyal et al. 2017) or leave it out.")
    target = scaled_lr(cfg, world_size)
    warmup = int(cfg.options.get("warmup_steps", 0) or 0)

    def lr_at(step: int) -> float:
        if step >= warmup:
            return target
        return cfg.lr + (target - cfg.lr) * step / warmup  # gradual warmup, §2.2

    return lr_at


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


class LrSchedule(Hook):
    """Installed by `lr_scaling`: before each step's forward, the rate `lr_schedule` gives for
    the step (the data-parallel degree sets k); the rates go to the record (`extra["lr"]`)."""

    def on_train_start(self, loop):
        self.lr_at = lr_schedule(loop.cfg, loop.ctx.size("dp"))
        self.optimizer = loop.optimizer
        if self.lr_at is not None:
            self.rates = loop.rec.extra["lr"] = []

    def before_forward(self, loop, step):
        if self.lr_at is not None:
            set_lr(self.optimizer, self.lr_at(step))
            self.rates.append(self.lr_at(step))
