"""Dropping the slowest: synchronous SGD that stops waiting for its straggler.

Chen et al. 2016 ("Revisiting Distributed Synchronous SGD", arXiv:1604.00981) observe that the
step of synchronous SGD is set by the tail of the workers' times. Their answer, **backup
workers**: run `n + b` workers, apply the first `n` gradients to arrive each step and drop the
`b` slowest. The update is still an exact mean gradient — over the rows that were kept.

Knob `drop_slowest=k` (trainer knob; `dp-naive`): every step the `k` data-parallel
ranks that were slowest the last time they computed skip forward and backward and contribute a
zero gradient; each kept rank weights its loss by `n·b_i / B_kept` (instead of `hetero`'s
`n·b_i / B`), so the unchanged average over all `n` ranks is

    (1/n) Σ_kept (n·b_i / B_kept) · g_i  =  Σ_kept b_i · g_i / B_kept

— exactly the gradient of the mean loss over the kept ranks' rows (for an even split: the kept
ranks' mean, rescaled by `n / (n - k)`). The logged loss is that mean too.

How a rank knows it is dropped: at the start of each step the ranks all-gather the compute
seconds (forward + backward) each measured the last time it computed — one tiny all-gather,
timed and counted like any collective — and the `k` largest are dropped (none until every rank
has been timed once, so step 0 always runs in full).

What differs from Chen et al., honestly:

- They drop *after the fact*: whichever `b` are last this step, with no prediction; their
  parameter servers simply ignore late gradients. A gloo/NCCL all-reduce needs every rank, so
  here the choice is made *before* computing, from history. A persistently slow rank (the
  `straggler` knob) is dropped every step after the first — its compute is saved, not wasted.
  A rank that was slow once stays dropped while its last time stays among the `k` slowest
  (no re-probing): right for a throttled GPU, wrong for transient noise, Chen et al.'s case.
- They add `b` backup workers so the batch kept is still `n` workers' worth; here there are no
  spares: the effective batch shrinks to `B_kept` (noisier gradients; the loss curve shows the
  cost). Launching `n + k` workers with `drop_slowest=k` is their setup.
- The dropped rank still loads its batch (its rows are skipped for this step, not reassigned)
  and still joins the all-reduce with zeros: the all-reduce costs the same; only compute is saved.
"""
from __future__ import annotations

import torch

from mgpukit.training.hetero import parse_split

# syncs that all-reduce whatever `.grad` holds, after backward. Not dp-bucketed: its kept ranks
# launch buckets from backward's hooks, in the order gradients complete, and a dropped rank
# would have to launch its zero buckets in that same order; nor DDP, whose reducer fires only
# from a backward the dropped rank never runs.
STRATEGIES = ("dp-naive",)


def check(cfg, dims, strategy: str) -> None:
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


class DropSlowest:
    """This rank's side of `drop_slowest` (module docstring): `computes(step)` at the start of
    each step, `timed(seconds)` after its forward and backward."""

    def __init__(self, rec, ctx, cfg, engine):
        self.rec, self.k = rec, int(cfg.options["drop_slowest"])
        self.n, self.me, self.group = ctx.size("dp"), ctx.coords["dp"], ctx.group("dp")
        self.rows = parse_split(cfg.options.get("batch_split")) or (cfg.global_batch // self.n,) * self.n
        self.last = 0.0  # my forward + backward seconds the last time I computed (0: never)
        self.scale = 1.0  # B / B_kept on a kept rank this step
        inner = engine.loss_fn
        engine.loss_fn = lambda *a, **kw: inner(*a, **kw) * self.scale  # LocalEngine's loss
        rec.extra["dropped"] = []  # per step, the dp ranks that skipped their compute

    def computes(self, step: int) -> bool:
        """Exchange the last compute times, pick the `k` slowest; False if this rank is one."""
        device = self.rec.ctx.device
        every = torch.zeros(self.n, dtype=torch.float64, device=device)  # (n,) seconds
        self.rec.all_gather(every, torch.tensor([self.last], dtype=torch.float64, device=device),
                            group=self.group)
        times = every.tolist()
        dropped = [] if min(times) == 0 else sorted(range(self.n), key=lambda r: (-times[r], -r))[:self.k]
        self.rec.extra["dropped"].append(sorted(dropped))
        kept_rows = sum(b for r, b in enumerate(self.rows) if r not in dropped)
        self.scale = sum(self.rows) / kept_rows
        return self.me not in dropped

    def timed(self, seconds: float) -> None:
        self.last = seconds
