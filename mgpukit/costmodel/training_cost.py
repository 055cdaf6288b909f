"""Time to train and what it costs: a token budget turned into steps, hours, GPU-hours, money.

A plan (:func:`mgpukit.costmodel.planner.plan`) predicts one step. A training run is

    steps      = ceil(tokens / (global_batch · seq_len))
    wall time  = steps · step_time
    GPU-hours  = wall time · GPUs / 3600
    cost       = GPU-hours · price per GPU-hour

so layouts compare by what a run costs and how long it takes, not by step time alone: on a
fixed GPU count cost follows time, across GPU counts it does not (more GPUs finish sooner
but at a lower MFU every GPU-hour buys fewer useful FLOPs).

The back-of-envelope version (Kaplan et al. 2020, "Scaling Laws for Neural Language
Models", §2.1: a training step costs ``C ≈ 6·N`` FLOPs per token for ``N`` parameters)
skips the layout altogether:

    GPU-hours ≈ 6 · N · D / (peak FLOP/s · MFU · 3600)

:func:`six_nd` computes it with the arithmetic spelled out, so a rule of thumb ("a 7B model
takes 100-500 GPU-hours") can be checked against the planner (notebook 09). Token budgets
come as a count or as epochs of a dataset (:func:`token_budget`); :func:`parse_tokens`
reads ``2T``, ``300B``, ``1.5e12``. No torch here.
"""

from __future__ import annotations

import math
import re

SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
SECONDS_PER_HOUR = 3600.0


def parse_tokens(text: "str | float | int", *, what: str = "--tokens") -> float:
    """A finite token count >= 1 from ``2T``, ``300B``, ``1.5e12``, ``2_000_000`` or a number;
    a ValueError that names ``what`` and shows the accepted forms otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9][0-9_]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", str(text))
        if not m:
            raise ValueError(f"{what} {text}: not a token count; write e.g. 2e12, 2T, 300B or 1.5M")
        value = float(m.group(1).replace("_", "")) * SUFFIXES[m.group(2).lower()]
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"{what} {text}: must be a finite number of tokens, at least 1 (e.g. 2T)")
    return value


def check_price(price: "float | None", *, what: str = "--price-per-gpu-hour") -> "float | None":
    """``price`` if it is a finite number >= 0 (None passes: no cost asked for)."""
    if price is None:
        return None
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
        raise ValueError(f"{what} {price}: must be a finite price >= 0 per GPU-hour (e.g. 2.5)")
    return float(price)


def token_budget(*, tokens=None, epochs=None, dataset_tokens=None) -> float:
    """Tokens a run processes: ``tokens``, or ``epochs`` passes over ``dataset_tokens``
    (both needed, fractional epochs allowed); refuses ambiguous or impossible budgets."""
    if tokens is not None and (epochs is not None or dataset_tokens is not None):
        raise ValueError("give either --tokens, or --epochs with --dataset-tokens, not both")
    if tokens is not None:
        return parse_tokens(tokens)
    if epochs is None and dataset_tokens is None:
        raise ValueError("no token budget: give --tokens, or --epochs with --dataset-tokens")
    if dataset_tokens is None:
        raise ValueError("--epochs needs --dataset-tokens (the dataset's size in tokens, e.g. 300B)")
    if epochs is None:
        raise ValueError("--dataset-tokens needs --epochs (passes over the dataset): add --epochs")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not math.isfinite(epochs) or epochs <= 0:
        raise ValueError(f"--epochs {epochs}: must be a finite number > 0")
    return float(epochs) * parse_tokens(dataset_tokens, what="--dataset-tokens")


def time_to_train(plan, tokens: float, *, price_per_gpu_hour: "float | None" = None) -> dict:
    """Steps, wall seconds, GPU-hours and (with a price) cost of training ``plan`` on ``tokens``.

    ``plan`` is a :class:`~mgpukit.costmodel.planner.Plan` (its layout's global batch, its
    model's sequence length, its predicted step time and GPU count). All figures are
    predictions; the last step is counted whole. ``ranges`` holds ``seconds``, ``days``,
    ``gpu_hours``, ``cost`` and ``mfu`` as (low, high) from the plan's error bar (the planner's
    errors on published runs of its framework), when it has one."""
    tokens = parse_tokens(tokens, what="tokens")
    price = check_price(price_per_gpu_hour, what="price_per_gpu_hour")
    per_step = plan.layout.global_batch * plan.model.seq_len
    steps = math.ceil(tokens / per_step)
    seconds = steps * plan.step_time_s
    gpu_hours = seconds * plan.gpus / SECONDS_PER_HOUR
    eb = getattr(plan, "error_bar", None)
    ranges = {}
    if eb is not None:
        for key, value in (("seconds", seconds), ("days", seconds / 86400), ("gpu_hours", gpu_hours),
                           ("cost", None if price is None else gpu_hours * price)):
            if value is not None:
                ranges[key] = eb.time(value)
        ranges["mfu"] = eb.rate(plan.mfu)
    return {
        "predicted": True,
        "tokens": tokens,
        "tokens_per_step": per_step,
        "steps": steps,
        "seconds": seconds,
        "days": seconds / 86400,
        "gpu_hours": gpu_hours,
        "price_per_gpu_hour": price,
        "cost": None if price is None else gpu_hours * price,
        "mfu": plan.mfu,
        "ranges": ranges,
        "error_bar": None if eb is None else eb.describe(),
    }


def six_nd(params: float, tokens: float, *, peak_flops: float, mfu: float, gpus: int = 1) -> dict:
    """Kaplan's ``6·N·D`` estimate: total FLOPs, GPU-hours at ``mfu`` of ``peak_flops``, and
    wall hours on ``gpus`` GPUs, with ``arithmetic``: the computation as one readable line."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu}: must be in (0, 1]")
    flops = 6.0 * params * tokens
    gpu_seconds = flops / (peak_flops * mfu)
    gpu_hours = gpu_seconds / SECONDS_PER_HOUR
    arithmetic = (f"6 · N · D = 6 · {params:.3g} · {tokens:.3g} = {flops:.3g} FLOPs; "
                  f"/ ({peak_flops / 1e12:.4g} TFLOP/s · {mfu:.1%} MFU) = {gpu_seconds:.3g} GPU-s "
                  f"= {gpu_hours:,.0f} GPU-hours")
    return {"flops": flops, "gpu_hours": gpu_hours, "hours": gpu_hours / gpus, "arithmetic": arithmetic}


def tokens_for_gpu_hours(gpu_hours: float, params: float, *, peak_flops: float, mfu: float) -> float:
    """The inverse of :func:`six_nd`: how many tokens ``gpu_hours`` train at ``mfu``."""
    return gpu_hours * SECONDS_PER_HOUR * peak_flops * mfu / (6.0 * params)


def format_duration(seconds: float) -> str:
    """``42 s``, ``3.5 h``, ``12.3 days``, ``2.1 years``: the unit a reader thinks in."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    if seconds < 2 * 365 * 86400:
        return f"{seconds / 86400:.1f} days"
    return f"{seconds / (365 * 86400):.1f} years"


def format_money(amount: float) -> str:
    """``$1,234`` or ``$2.35 M``."""
    return f"${amount / 1e6:,.2f} M" if amount >= 1e6 else f"${amount:,.0f}"


def _span(budget: dict, key: str, fmt) -> str:
    lo_hi = budget.get("ranges", {}).get(key)
    return f" ({fmt(lo_hi[0])} … {fmt(lo_hi[1])})" if lo_hi else ""


def format_training(budget: dict) -> str:
    """One block of text for ``mgpukit plan --tokens``: every figure labelled predicted, with
    its range from the error bar in brackets."""
    lines = [f"predicted time to train   {budget['tokens']:.3g} tokens = {budget['steps']:,} steps of "
             f"{budget['tokens_per_step']:,} tokens: {format_duration(budget['seconds'])} wall"
             f"{_span(budget, 'seconds', format_duration)}, {budget['gpu_hours']:,.0f} GPU-hours"
             f"{_span(budget, 'gpu_hours', lambda h: f'{h:,.0f}')}"]
    if budget["cost"] is not None:
        lines.append(f"predicted cost            {format_money(budget['cost'])}{_span(budget, 'cost', format_money)} "
                     f"at ${budget['price_per_gpu_hour']:,.2f} per GPU-hour")
    if budget.get("error_bar"):
        lines.append(f"  (ranges: the planner's {budget['error_bar']})")
    return "\n".join(lines)


def format_training_table(plans, budgets: list[dict]) -> str:
    """The ``--search`` table's companion: time to train, GPU-hours and cost of each ranked plan."""
    priced = budgets and budgets[0]["cost"] is not None
    lines = [f"time to train {budgets[0]['tokens']:.3g} tokens (predicted)" if budgets else "",
             f"{'#':>3} {'dp':>4} {'tp':>3} {'pp':>3} {'steps':>10} {'wall':>12} {'wall range':>24} "
             f"{'GPU-hours':>12}" + (f" {'cost':>12} {'cost range':>24}" if priced else "")]
    for i, (pl, b) in enumerate(zip(plans, budgets), 1):
        lay = pl.layout
        lines.append(f"{i:>3} {lay.dp:>4} {lay.tp:>3} {lay.pp:>3} {b['steps']:>10,} "
                     f"{format_duration(b['seconds']):>12} {_span(b, 'seconds', format_duration).strip():>24} "
                     f"{b['gpu_hours']:>12,.0f}"
                     + (f" {format_money(b['cost']):>12} {_span(b, 'cost', format_money).strip():>24}" if priced else "")
                     + ("" if pl.fits else "  (does not fit)"))
    if budgets and budgets[0].get("error_bar"):
        lines.append(f"(ranges: the planner's {budgets[0]['error_bar']})")
    return "\n".join(lines)
