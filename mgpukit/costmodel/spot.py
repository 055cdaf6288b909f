"""Spot (preemptible) instances: what a run costs when it can be taken away at any moment.

Cloud providers sell idle GPUs at a discount `d` (the articles quote 60–90 %) and may reclaim
them with little notice. A preempted job loses the work since its last checkpoint and pays a
restart (new instances, loading the checkpoint). With preemptions arriving as a Poisson process
of rate `λ` (per hour of the *job* — any of its instances), checkpoints every `τ` seconds of
work costing `δ` each, and a restart of `R`, the expected wall time of one segment of `τ` work
is (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
eq. 11, exact for exponential failures):

    E[segment] = (1/λ) · e^{λR} · (e^{λ(τ+δ)} − 1)

so a job of `W` seconds of work takes `W/τ · E[segment]`, a *stretch* `s ≥ 1` over `W`. On spot
it costs `(1 − d) · s · W · price`; on demand `W · price` (plus its own checkpoints, if any):

    savings = 1 − (1 − d) · s

The best interval balances checkpoint cost against lost work: `τ* ≈ sqrt(2δ/λ)` (Young 1974,
"A first order approximation to the optimum checkpoint interval"). Savings of 60 % need
`(1 − d)·s ≤ 0.4`: at a 70 % discount the stretch must stay under 1.33.

No torch here; times in seconds, rates per hour, prices per GPU-hour.
"""
from __future__ import annotations

import math


def segment_time(work_s: float, *, checkpoint_s: float, preemptions_per_hour: float,
                 restart_s: float) -> float:
    """Expected wall seconds to get `work_s` of work plus its checkpoint done (Daly's formula)."""
    lam = preemptions_per_hour / 3600.0
    if lam == 0:
        return work_s + checkpoint_s
    return math.exp(lam * restart_s) * math.expm1(lam * (work_s + checkpoint_s)) / lam


def expected_wall_time(work_s: float, *, checkpoint_every_s: float, checkpoint_s: float,
                       preemptions_per_hour: float, restart_s: float = 300.0) -> float:
    """Expected wall seconds for a job of `work_s` seconds of work on preemptible instances."""
    if checkpoint_every_s <= 0 or work_s < 0:
        raise ValueError("checkpoint_every_s must be > 0 and work_s >= 0.")
    segments = work_s / checkpoint_every_s
    return segments * segment_time(checkpoint_every_s, checkpoint_s=checkpoint_s,
                                   preemptions_per_hour=preemptions_per_hour, restart_s=restart_s)


def optimal_interval(checkpoint_s: float, preemptions_per_hour: float) -> float:
    """Young's interval `sqrt(2δ/λ)` in seconds of work (infinite when nothing preempts)."""
    lam = preemptions_per_hour / 3600.0
    return math.inf if lam == 0 else math.sqrt(2 * checkpoint_s / lam)


def spot_cost(work_s: float, *, gpus: int, price_per_gpu_hour: float, discount: float,
              preemptions_per_hour: float, checkpoint_every_s: float, checkpoint_s: float,
              restart_s: float = 300.0) -> dict:
    """Wall time and cost of a job on spot vs on demand (module docstring for the model).

    Returns wall_s, stretch (wall / work), spot_cost, on_demand_cost, savings (fraction)."""
    if not 0 <= discount < 1:
        raise ValueError(f"discount={discount}: a fraction in [0, 1).")
    wall = expected_wall_time(work_s, checkpoint_every_s=checkpoint_every_s, checkpoint_s=checkpoint_s,
                              preemptions_per_hour=preemptions_per_hour, restart_s=restart_s)
    on_demand = work_s / 3600.0 * gpus * price_per_gpu_hour
    spot = wall / 3600.0 * gpus * price_per_gpu_hour * (1 - discount)
    return {"work_s": work_s, "wall_s": wall, "stretch": wall / work_s if work_s else 1.0,
            "spot_cost": spot, "on_demand_cost": on_demand,
            "savings": 1 - spot / on_demand if on_demand else 0.0}


def savings_grid(*, discount: float, rates=(0.0, 0.1, 0.5, 1.0, 2.0, 4.0),
                 intervals_s=(300, 1800, 3600, 4 * 3600), checkpoint_s: float = 60.0,
                 restart_s: float = 300.0) -> list[dict]:
    """Savings for each (preemption rate, checkpoint interval): one row each."""
    rows = []
    for lam in rates:
        for tau in intervals_s:
            out = spot_cost(100 * 3600.0, gpus=1, price_per_gpu_hour=1.0, discount=discount,
                            preemptions_per_hour=lam, checkpoint_every_s=tau,
                            checkpoint_s=checkpoint_s, restart_s=restart_s)
            rows.append({"preemptions_per_hour": lam, "checkpoint_every_s": tau,
                         "stretch": out["stretch"], "savings": out["savings"]})
    return rows
