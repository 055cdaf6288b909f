"""From a run's configuration to a pipeline plan: schedule, ranks ``p``, micro-batches ``m``,
chunks per rank ``v`` — checked before anything trains, with what to change when it can't run.

What the run asks (read once, when the layout is resolved: `mgpukit.prepare.resolve_layout`,
which keeps the answer in the `Layout` — ``num_micro_batches``, ``v``):

- ``micro_batches``: ``m``, the micro-batches per step. When left at its default of 1, a
  pipeline picks ``m = 2·p`` (enough to shrink the bubble to about a third; ``p`` if the
  global batch doesn't divide into ``2·p``). The naive model split ``mp-naive`` always runs
  the whole batch at once (``m = 1``): that is what makes it naive. The layout's
  ``num_micro_batches`` (``layout={"num_micro_batches": 1}``) asks for ``m`` exactly, 1 included
  (for ``mp-naive`` too: the naive schedule then takes each micro-batch through every stage
  before the next, as notebook 04's schedule widget shows).
- ``v`` (``--v`` or ``-o v=K``): model chunks per rank, interleaved only (default 2).
"""
from __future__ import annotations

import dataclasses

from mgpukit.costmodel.pipeline import bubble_fraction
from mgpukit.costmodel.schedules import build_schedule, max_in_flight
from mgpukit.costmodel.simulate import simulate
from mgpukit.strategies.pipeline.stages import check_split, check_stage_layers


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelinePlan:
    schedule: str  # a name from mgpukit.costmodel.schedules.SCHEDULES
    p: int  # pipeline ranks
    m: int  # micro-batches per step
    v: int = 1  # model chunks per rank (interleaved)

    @property
    def num_stages(self) -> int:
        return self.p * self.v


def _n_layers(cfg) -> tuple[int, str]:
    mcfg = cfg.model_config()
    return (mcfg.n_layer, "transformer blocks") if cfg.is_gpt else (mcfg.n_layers, "layers")


def plan_for(schedule: str, cfg, p: int, dp: int = 1, v: int | None = None,
             stage_layers: tuple[int, ...] | None = None, *, m: int | None = None) -> PipelinePlan:
    """The plan for ``schedule`` on ``p`` ranks, each of ``dp`` replicas taking its slice of
    the global batch (``stage_layers``: an uneven split, v = 1; ``m``: the micro-batches asked
    of the layout, which may be 1); raises ``ValueError`` with what to change."""
    asked = v
    v = int(2 if asked is None else asked) if schedule == "interleaved" else 1
    if schedule != "interleaved" and asked not in (None, 1):
        raise ValueError(f"v={asked} (model chunks per rank) only applies to the interleaved "
                         f"schedule; drop it or run pp-interleaved.")
    if v < 1:
        raise ValueError(f"v={v}: the number of model chunks per rank must be at least 1 (2 or more "
                         f"for the interleaved schedule).")
    n_layers, what = _n_layers(cfg)
    if stage_layers is not None:
        if v != 1:
            raise ValueError(f"stage_layers splits the model into one stage per rank; the interleaved "
                             f"schedule's v={v} chunks per rank are equal slices. Drop stage_layers or use 1f1b.")
        check_stage_layers(stage_layers, n_layers, p, what=what)
    else:
        check_split(n_layers, p, v, model_name=cfg.model, what=what)
    if cfg.global_batch % dp:
        raise ValueError(f"global_batch={cfg.global_batch} does not split over dp={dp} replicas; "
                         f"use a multiple of {dp}.")
    gb = cfg.global_batch // dp
    if m is not None:  # asked of the layout: exactly this many (the naive schedule too)
        pass
    elif schedule == "naive":
        m = 1
    elif cfg.micro_batches > 1:
        m = cfg.micro_batches
    else:
        choices = [c for c in (2 * p, p) if gb % c == 0]  # multiples of p: interleaved-ready
        if not choices:
            raise ValueError(f"global_batch={gb} does not split into 2·p={2 * p} or p={p} "
                             f"micro-batches; use a global batch that is a multiple of {p}, or "
                             f"set micro_batches explicitly.")
        m = choices[0]
    if gb % m:
        raise ValueError(f"global_batch={gb} does not split into micro_batches={m} equal "
                         f"micro-batches; choose micro_batches among the divisors of {gb}, "
                         f"or a global batch that is a multiple of {m}.")
    build_schedule(schedule, p, m, v)  # interleaved: m must be a multiple of p (says so)
    return PipelinePlan(schedule=schedule, p=p, m=m, v=v)


def theory_for(plan: PipelinePlan) -> dict:
    """Predicted figures with equal stage costs: the closed-form bubble (``F=1, B=2``; for
    zero-bubble ``F = I = W``), the simulator's, and micro-batches in flight per rank."""
    table = build_schedule(plan.schedule, plan.p, plan.m, plan.v)
    return {
        "schedule": plan.schedule, "p": plan.p, "m": plan.m, "v": plan.v,
        "bubble_fraction": bubble_fraction(plan.schedule, plan.p, plan.m, plan.v),
        "bubble_fraction_simulated": simulate(table, cost_f=1.0, cost_b=2.0).bubble_fraction,
        "microbatches_in_flight": [max_in_flight(table, r) for r in range(plan.p)],
        "assumes": "equal stage costs, free point-to-point, backward = 2 x forward",
    }


def plan_of(layout, dims) -> PipelinePlan:
    """The plan a resolved layout runs (its schedule, m and v; p from the mesh)."""
    return PipelinePlan(schedule=layout.schedule, p=dims.pp, m=layout.num_micro_batches, v=layout.v)


def theory(cfg, dims) -> dict:
    """The registry's ``theory(cfg, dims)`` for every pipeline strategy: its resolved plan's."""
    return theory_for(plan_of(cfg.layout, dims))
