"""Notebook 03: gradient compression's step time against link bandwidth, from emulated runs.

- `median_step_time(record)`: a run's median step after the warm-up (PowerSGD's first steps are dense)
- `step_time_curves(fast, link)`: each method's predicted step time over a sweep of link
  bandwidths β — its emulated compute plus the alpha-beta time of its exchange
- `breakeven_bandwidth`, `breakeven_label`: the largest β at which a method still beats fp32 DDP
"""
from __future__ import annotations

import statistics

from mgpukit.config import RunConfig
from mgpukit.costmodel.profile import Link
from mgpukit.strategies.compression import theory

# strategy name -> the method name of `theory.exchange_plan`
METHOD_OF = {"ddp": "fp32", "dp-fp16": "fp16", "dp-bf16": "bf16", "dp-int8": "int8",
             "dp-topk": "topk", "dp-powersgd": "powersgd"}


def median_step_time(record: dict, *, skip: int = 2) -> float:
    """Median step time after `skip` warm-up steps (PowerSGD's first steps are dense)."""
    times = record["step_time_s"]
    return statistics.median(times[skip:] or times)


DEFAULT_BETAS = [10 ** (8 + 4 * i / 120) for i in range(121)]  # 100 MB/s .. 1 TB/s


def step_time_curves(fast: list[dict], link: Link, *, alpha: float | None = None, betas=None,
                     skip: int = 2) -> dict[str, list[float]]:
    """{strategy: predicted step seconds at each β of `betas`}, from one emulated run per method.

    Each method's compute (forward, backward, optimizer, compress, decompress) is its emulated
    step time on `link` minus its predicted exchange time there; the curve adds the alpha-beta
    time of its exchange on a link (`alpha`, β)."""
    betas = betas or DEFAULT_BETAS
    alpha = link.alpha if alpha is None else alpha
    curves = {}
    for rec in fast:
        method, n = METHOD_OF[rec["strategy"]], rec["world_size"]
        plan = theory.exchange_plan(method, theory.param_shapes(RunConfig(**rec["config"])), n,
                                    **theory.knobs_of(method, rec["config"]["options"]))
        compute = median_step_time(rec, skip=skip) - theory.plan_time(plan, n, link)
        curves[rec["strategy"]] = [compute + theory.plan_time(plan, n, Link(alpha=alpha, beta=b))
                                   for b in betas]
    return curves


def breakeven_bandwidth(times, dense_times, betas, *, margin: float = 0.1) -> float | None:
    """The largest β of the sweep at which `times` is at least `margin` faster than
    `dense_times` (None: nowhere). A margin, because a µs of implementation difference in
    compute is no reason to compress."""
    wins = [b for b, t, d in zip(betas, times, dense_times) if t < (1 - margin) * d]
    return max(wins) if wins else None


def breakeven_label(times, dense_times, betas=None) -> str:
    """`breakeven_bandwidth` in words: "12.3 GB/s", "never" or "at every β shown"."""
    betas = betas or DEFAULT_BETAS
    if dense_times is None:
        return "?"
    b = breakeven_bandwidth(times, dense_times, betas)
    if b is None:
        return "never"
    return "at every β shown" if b == max(betas) else f"{b / 1e9:.3g} GB/s"
