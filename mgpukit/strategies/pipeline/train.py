"""The training loop every hand-written pipeline strategy shares.

Per rank: keep only this rank's stages of the model (stage ``s`` on rank ``s % p``), build an
optimizer over their parameters, and for every step split the global batch into ``m``
micro-batches, run this rank's column of the schedule table with the executor, and step.

What is reported (all "measured" by the run itself — wall clock, or the virtual clock in
emulated mode):

- losses and gradient norms: the last stage holds the loss and every rank a part of the
  gradient; they are combined once, after training (``sum`` of losses, ``sqrt`` of the sum
  of squared norms), so the logging never sits inside a timed step;
- ``rec.extra``: ``bubble_fraction`` (from the timeline, ``bubble.py``), ``idle_s`` and
  ``busy_s`` per rank, ``activations_in_flight_peak`` (bytes, ``ActivationMeter``),
  ``activation_bytes_per_microbatch``, ``microbatches_in_flight_measured`` (their ratio) and
  ``microbatches_in_flight`` (counted by the executor);
- rank 0 returns ``{"weights": state_dict}`` of the whole model, gathered from the stages
  (names as in the unsplit model) for the parity check.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from mgpukit.costmodel.schedules import build_schedule
from mgpukit.measure.memory import memory_breakdown
from mgpukit.strategies.common import full_state_dict
from mgpukit.strategies.pipeline.bubble import measure_bubble
from mgpukit.strategies.pipeline.executor import PipelineExecutor, PipelineMeter
from mgpukit.strategies.pipeline.p2p import StageLinks
from mgpukit.strategies.pipeline.stages import boundary_shape, split_model


def train_pipeline(ctx, rec, *, model: nn.Module, batches, loss_fn, schedule: str, m: int,
                   v: int, steps: int, make_optimizer, device=None) -> dict | None:
    """Train ``model`` for ``steps`` steps with pipeline ``schedule`` on all launched ranks.

    ``batches(step) -> (x, y)`` gives the *global* batch (every rank draws the same one; the
    first stage uses ``x``, the last ``y``). Returns the full weights on rank 0.
    """
    device = device or ctx.device
    p, rank = ctx.world_size, ctx.rank
    n_stages = p * v
    stages = split_model(model, n_stages, keep=[s for s in range(n_stages) if s % p == rank])
    for stage in stages.values():
        stage.to(device)
    holder = nn.ModuleList(stages.values())  # this rank's share, for the optimizer and memory
    params = list(holder.parameters())
    optimizer = make_optimizer(params)
    actions = build_schedule(schedule, p, m, v)[rank]

    meter = PipelineMeter(params)
    x0, _ = batches(0)
    links = StageLinks(rec, stage_rank=lambda s: s % p, device=device,
                       shape=boundary_shape(model, x0.shape[0] // m))
    executor = PipelineExecutor(rec, stages, num_stages=n_stages, links=links, loss_fn=loss_fn,
                                meter=meter, split_backward=schedule == "zb-h1")
    logs = []
    for step in range(steps):
        x, y = batches(step)
        # one tensor per micro-batch (as a loader would give them: the meter counts storages)
        xs = [c.detach().to(device).clone() for c in x.chunk(m)]
        ys = [c.to(device).clone() for c in y.chunk(m)]
        if x.requires_grad:  # an input that wants a gradient (the lab's): one leaf each
            xs = [c.requires_grad_() for c in xs]
        with rec.step(step):
            loss = executor.run_step(actions, xs, ys)
            sq_norm = sum(float(p_.grad.detach().double().pow(2).sum()) for p_ in params
                          if p_.grad is not None)
            with rec.compute("opt"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
        logs.append([float(loss) if loss is not None else 0.0, sq_norm])

    _log_steps(rec, logs, device)
    rec.extra.update(measure_bubble(rec, steps, device=device) or {})
    rec.memory = memory_breakdown(holder, optimizer, meter, device)
    per_mb = executor.bytes_per_microbatch or 0
    rec.extra.update({
        "schedule": schedule, "p": p, "m": m, "v": v, "stages": sorted(stages),
        "activations_in_flight_peak": meter.peak,
        "activation_bytes_per_microbatch": per_mb,
        "microbatches_in_flight_measured": meter.peak / per_mb if per_mb else None,
        "microbatches_in_flight": executor.in_flight_peak,
    })
    return gather_weights(rec, holder, device)


def _log_steps(rec, logs: list, device) -> None:
    """Loss = sum over ranks (only the last stage's is non-zero); grad norm = sqrt(sum sq)."""
    t = torch.tensor(logs, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        with rec.clock.paused():
            dist.all_reduce(t)
    for loss, sq in t.cpu().tolist():
        rec.log(loss, sq ** 0.5)


def gather_weights(rec, module: nn.Module, device=None) -> dict | None:
    """Merge every rank's stage weights (full-model names) on rank 0; not timed or counted."""
    mine = full_state_dict(module)
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return {"weights": _strip_list_prefix(mine)}
    every = [None] * dist.get_world_size() if rec.rank == 0 else None
    with rec.clock.paused():
        dist.gather_object(_strip_list_prefix(mine), every, dst=0)
    if rec.rank != 0:
        return None
    merged = {}
    for part in every:
        merged.update(part)
    return {"weights": merged}


def _strip_list_prefix(state: dict) -> dict:
    """``ModuleList`` adds ``"0."``, ``"1."`` … in front of each stage's (full-model) names."""
    return {k.split(".", 1)[1]: v for k, v in state.items()}
