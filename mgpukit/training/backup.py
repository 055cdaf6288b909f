"""Dropping the slowest: synchronous SGD that stops waiting for its straggler.

Chen et al. 2016 ("Revisiting Distributed Synchronous SGD", arXiv:1604.00981) observe that the
step of synchronous SGD is set by the tail of the workers' times. Their answer, **backup
workers**: run `n + b` workers, apply the first `n` gradients to arrive each step and drop the
`b` slowest. The update is still an exact mean gradient — over the rows that were kept.

Knob `drop_slowest=k` (a hook the experiment installs; `dp-naive`): every step the `k` data-parallel
ranks that were slowest the last time they computed skip forward and backward and contribute a
zero gradient; each kept rank weights its loss by `n·b_i / B_kept` (instead of `hetero`'s
`n·b_i / B`), so the unchanged average over all `n` ranks is

    (1/n) Σ_kept (n·b_i / B_kept) · g_i  =  Σ_kept b_i · g_i / B_kept

— exactly the gradient of the mean loss over the kept ranks' rows (for an even split: the kept
ranks' mean, rescaled by `n / (n - k)`). The logged loss is that mean too.

How a rank knows it is dropped — from measured times only, as a straggler mitigation must:

- **Warm-up is not a measurement.** Step 0 creates the gradients and the optimizer's state and
  warms allocators and caches, so its time says little about a rank's pace: the first
  :data:`WARMUP_STEPS` steps run in full and are not timed. The next step also runs in full and
  is every rank's first measurement; dropping starts after it (step 2 by default).
- **The choice is the measured one.** At the start of each later step the ranks all-gather the
  compute seconds (forward + backward) each measured the last time it computed — one tiny
  all-gather, timed and counted like any collective — and the ``k`` largest are dropped.
- **A dropped rank is re-timed.** It cannot be measured while it skips its compute, so every
  :data:`RETIME_EVERY` steps after the first measurement one step runs in full and every rank
  posts a fresh time (steps 5, 9, 13, … by default): a rank dropped for a noisy step (or a
  straggler that recovered) is back at the next re-time step, and a persistent straggler is
  dropped again. The price: that step waits for the straggler.

What differs from Chen et al., honestly:

- They drop *after the fact*: whichever `b` are last this step, with no prediction; their
  parameter servers simply ignore late gradients. A gloo/NCCL all-reduce needs every rank, so
  here the choice is made *before* computing, from each rank's latest measured time — so the
  re-time steps above, which their scheme does not need.
- They add `b` backup workers so the batch kept is still `n` workers' worth; here there are no
  spares: the effective batch shrinks to `B_kept` (noisier gradients; the loss curve shows the
  cost). Launching `n + k` workers with `drop_slowest=k` is their setup.
- The dropped rank still loads its batch (its rows are skipped for this step, not reassigned)
  and still joins the all-reduce with zeros: the all-reduce costs the same; only compute is saved.
"""
from __future__ import annotations

import torch

from mgpukit.training.hooks import Hook

# syncs that all-reduce whatever `.grad` holds, after backward. Not dp-bucketed: its kept ranks
# launch buckets from backward's hooks, in the order gradients complete, and a dropped rank
# would have to launch its zero buckets in that same order; nor DDP, whose reducer fires only
# from a backward the dropped rank never runs.
STRATEGIES = ("dp-naive",)
WARMUP_STEPS = 1  # steps run in full and not timed: step 0 creates gradients and optimizer state
RETIME_EVERY = 4  # every this many steps after the first measured one, a full step re-times every rank


def runs_in_full(step: int) -> bool:
    """Whether no rank may be dropped at ``step``: warm-up, the first measured step, and the
    re-time steps (module docstring)."""
    first = WARMUP_STEPS  # the first measured step
    return step <= first or (step - first) % RETIME_EVERY == 0


def check_drop_slowest(cfg, dims, strategy: str) -> None:
    """Refuse `drop_slowest` where it cannot work (ValueError saying what to change)."""
    k = cfg.options.get("drop_slowest") or 0
    if not k:
        return
    if strategy not in STRATEGIES:
        raise ValueError(f"drop_slowest runs with {', '.join(STRATEGIES)} (a sync that all-reduces whatever "
                         f"the gradients hold, after backward); {strategy!r} syncs from backward's hooks, "
                         f"which a dropped rank never runs.")
    if dims.tp > 1 or dims.pp > 1:
        raise ValueError("drop_slowest drops whole data-parallel ranks; it runs with tp = pp = 1.")
    if k >= dims.dp:
        raise ValueError(f"drop_slowest={k} would drop every one of the dp={dims.dp} ranks; keep at least one.")


class DropSlowest(Hook):
    """Installed by `drop_slowest=k`: this rank's side of backup workers (module docstring) —
    before forward it learns whether it computes this step (`computes`), after backward it
    keeps the seconds its compute took (`timed`). A dropped rank's engine does nothing: no
    forward, no backward — a zero gradient and no share of the loss."""

    no_parity = ("no reference: drop_slowest trains on the kept ranks' rows "
                 "(tests/test_stragglers.py checks that gradient)")

    def __init__(self, k: int, rows: tuple[int, ...] | None = None):
        self.k, self.rows = k, rows  # rows per dp rank (None: an even split of the global batch)
        self.last = 0.0  # my forward + backward seconds the last time I computed after warm-up (0: never)
        self.step = 0
        self.scale = 1.0  # B / B_kept on a kept rank this step
        self.start = 0.0
        self.computing = True  # False: this rank is dropped this step

    def on_train_start(self, loop):
        ctx, self.rec = loop.ctx, loop.rec
        self.n, self.me, self.group = ctx.size("dp"), ctx.coords["dp"], ctx.group("dp")
        self.rows = self.rows or (loop.cfg.global_batch // self.n,) * self.n
        engine = loop.parts.engine
        inner = engine.loss_fn
        engine.loss_fn = lambda *a, **kw: inner(*a, **kw) * self.scale  # LocalEngine's loss
        step = engine.forward_backward
        engine.forward_backward = lambda *a, **kw: step(*a, **kw) if self.computing else 0.0
        self.rec.extra["dropped"] = []  # per step, the dp ranks that skipped their compute

    def before_forward(self, loop, step):
        self.computing = self.computes(step)
        self.start = self.rec.now()

    def after_backward(self, loop, step):
        if self.computing:
            self.timed(self.rec.now() - self.start)

    def computes(self, step: int) -> bool:
        """Exchange the last measured compute times, pick the `k` slowest; False if this rank is
        one. Nobody is dropped on a step that `runs_in_full` (the exchange still runs: every
        step costs the same collectives)."""
        self.step = step
        device = self.rec.ctx.device
        every = torch.zeros(self.n, dtype=torch.float64, device=device)  # (n,) seconds
        self.rec.all_gather(every, torch.tensor([self.last], dtype=torch.float64, device=device),
                            group=self.group)
        times = every.tolist()
        dropped = ([] if runs_in_full(step) or min(times) == 0 else
                   sorted(range(self.n), key=lambda r: (-times[r], -r))[:self.k])
        self.rec.extra["dropped"].append(sorted(dropped))
        kept_rows = sum(b for r, b in enumerate(self.rows) if r not in dropped)
        self.scale = sum(self.rows) / kept_rows
        return self.me not in dropped

    def timed(self, seconds: float) -> None:
        if self.step >= WARMUP_STEPS:  # a warm-up step is not a measurement
            self.last = seconds
