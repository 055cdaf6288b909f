"""A measured step time is a median of repeated steps, with its spread — never one sample.

On a shared machine a single step can be 2-50× its neighbours (another process got the core,
the allocator grew, a page fault); the median of the steady steps is what the program costs,
and the spread says how far to trust it. `summarize` is what the record keeps as
`record["step_time"]`:

    {"median_s", "p25_s", "p75_s", "min_s", "max_s", "n", "skipped", "spread", "source"}

`spread` is the interquartile range over the median ((p75 - p25) / median): 0.05 means the middle
half of the steps lie within 5 % of each other. The first step is left out when there are others
(warm-up: allocations, DDP's bucket rebuild, cuDNN plans). `format_spread` writes it as a
notebook or a benchmark should print it: "23.5 ms (median of 19 steps, IQR ±4 %)".
"""
from __future__ import annotations

import statistics


def summarize(step_times: list[float], *, skip: int = 1, source: str = "measured") -> dict | None:
    """Median, quartiles and spread of `step_times` after the first `skip` (warm-up) steps."""
    times = [float(t) for t in step_times if t is not None]
    if not times:
        return None
    skipped = skip if len(times) > skip else 0
    steady = sorted(times[skipped:])
    median = statistics.median(steady)
    if len(steady) >= 2:
        p25, _, p75 = statistics.quantiles(steady, n=4, method="inclusive")
    else:
        p25 = p75 = steady[0]
    return {"median_s": median, "p25_s": p25, "p75_s": p75, "min_s": steady[0], "max_s": steady[-1],
            "n": len(steady), "skipped": skipped,
            "spread": (p75 - p25) / median if median > 0 else 0.0, "source": source}


def median_step(record: dict) -> float | None:
    """The record's measured (or emulated) step: the median of its steady steps."""
    summary = record.get("step_time") or summarize(record.get("step_time_s") or [])
    return summary["median_s"] if summary else None


def format_spread(summary: dict | None, *, unit: str = "ms") -> str:
    """"23.5 ms (median of 19 steps, IQR ±4 %)" — a figure with how far to trust it."""
    if not summary:
        return "n/a"
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    label = "µs" if unit == "us" else unit
    return (f"{summary['median_s'] * scale:.3g} {label} (median of {summary['n']} steps, "
            f"IQR ±{50 * summary['spread']:.0f} %)")


def beyond_spread(a: dict | None, b: dict | None) -> bool:
    """The course's one noise rule: two measured runs differ only when their interquartile ranges
    do not overlap (each a `summarize` record). On a shared CPU a timing inside that overlap is the
    machine's noise, not the program's effect — show the emulated or predicted figure instead."""
    if not a or not b:
        return False
    return a["p75_s"] < b["p25_s"] or b["p75_s"] < a["p25_s"]
