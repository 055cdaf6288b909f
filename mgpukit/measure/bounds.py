"""Figures that break a physical bound are flagged, not shown as findings.

Some measured figures cannot be true whatever the strategy does, and when one shows up it is the
measurement that broke (another process took a core, spinning OpenMP threads, a thread count
that differs between the runs compared), not a discovery:

- **speedup above the worker count** — n workers doing the work of one cannot be more than
  n× faster (same global batch: strong scaling);
- **weak-scaling efficiency above 1** — n workers each doing one worker's work cannot finish a
  step sooner than one worker doing it alone;
- **a strictly larger job faster** — the same program on the same resources with strictly more
  work to do (a bigger batch, an added delay) cannot take less time.

Each check returns a flag (or None) that says which bound, by how much, and whether the excess
lies within the runs' own spread (`measure.spread`: half the interquartile range of each run)
— "within the noise" — or beyond it, when the figure is an artefact. `flag_scaling` puts the
flags in each record (`record["flags"]`); `show_flags` is the line a notebook prints under its
figure.
"""
from __future__ import annotations

from mgpukit.measure.spread import summarize


def _summary(record: dict) -> dict | None:
    return record.get("step_time") or summarize(record.get("step_time_s") or [])


def _throughput(record: dict) -> float:
    if record.get("tokens_per_s"):
        return float(record["tokens_per_s"])
    s = _summary(record)
    tokens = record["config"]["global_batch"]  # rows or sequences: only ratios are used
    return tokens / s["median_s"]


def _noise(*records: dict) -> float:
    """Relative uncertainty of a ratio of these runs' medians: the sum of their half-IQRs."""
    return sum(0.5 * ((_summary(r) or {}).get("spread") or 0.0) for r in records)


def _flag(kind: str, figure: str, value: float, bound: float, records: tuple, why: str) -> dict | None:
    if not value > bound:
        return None
    noise = _noise(*records)
    within = value <= bound * (1 + noise)
    sources = sorted({r.get("mode", "?") for r in records})
    return {"kind": kind, "figure": figure, "value": value, "bound": bound,
            "excess": value / bound - 1, "noise": noise, "within_noise": within,
            "source": "/".join(sources),
            "message": (f"{figure} = {value:.2f} breaks the bound {bound:.2f} ({why}) by "
                        f"{100 * (value / bound - 1):.0f} %: "
                        + ("within the runs' spread — read it as 'at the bound'." if within else
                           "beyond the runs' spread — a measuring artefact (other load on the "
                           "cores, threads that differ between the runs), not a finding."))}


def check_speedup(base: dict, run: dict) -> dict | None:
    """Strong scaling: `run`'s throughput over `base`'s, bounded by the ratio of their workers."""
    value = _throughput(run) / _throughput(base)
    bound = run["world_size"] / base["world_size"]
    return _flag("speedup_above_workers", f"speedup of {run['world_size']} workers over "
                 f"{base['world_size']}", value, bound, (base, run),
                 f"{run['world_size']}/{base['world_size']} workers")


def check_weak_scaling(base: dict, run: dict) -> dict | None:
    """Weak scaling: efficiency = base step / run step (each worker the same batch), bound 1."""
    value = _summary(base)["median_s"] / _summary(run)["median_s"]
    return _flag("weak_efficiency_above_1", f"weak-scaling efficiency at {run['world_size']} workers",
                 value, 1.0, (base, run), "n workers cannot beat one worker's step")


def check_larger_job(smaller: dict, larger: dict, *, what: str = "the larger job",
                     baseline: str = "the smaller job") -> dict | None:
    """`larger` does strictly more work than `smaller` on the same resources: it cannot be faster.
    The figure is smaller's step over larger's (above 1: the larger job was faster); `what` and
    `baseline` name the two jobs in the message."""
    value = _summary(smaller)["median_s"] / _summary(larger)["median_s"]
    return _flag("larger_job_faster", f"step of {baseline} / step of {what}", value, 1.0,
                 (smaller, larger), "more work cannot take less time")


def flag_scaling(records: list[dict], scaling: str = "strong") -> list[dict]:
    """Check every record of a scaling series against the first (the baseline); each flag is
    also appended to its record's `flags`. Returns every flag raised."""
    check = {"strong": check_speedup, "weak": check_weak_scaling}[scaling]
    base, flags = records[0], []
    for rec in records[1:]:
        if rec.get("mode") != base.get("mode"):  # never a measured line over an emulated base
            continue
        flag = check(base, rec)
        if flag is not None:
            rec.setdefault("flags", []).append(flag)
            flags.append(flag)
    return flags


def show_flags(records_or_flags) -> str:
    """One line per flag in these records (or flags) — what a notebook prints under a figure;
    "" when every figure is within its physical bounds."""
    items = list(records_or_flags.values()) if isinstance(records_or_flags, dict) else list(records_or_flags)
    flags = [f for item in items for f in (item.get("flags", []) if "kind" not in item else [item])]
    return "\n".join(f"⚠ {f['message']}" for f in flags)
