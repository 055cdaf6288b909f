"""One row of headline numbers per record, for tables in notebooks and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mgpukit.measure.spread import median_step

from .style import Record, as_records, format_dims, format_time, source_kind, source_label


def table_summary(records: Record | Sequence[Record]) -> list[dict[str, Any]]:
    """One dict per record; raw numbers (bytes, seconds), None where the record has no data.

    - `source`: "measured" | "emulated" | "predicted"; `source_label` says which device/profile;
    - `median_step_time_s`: the record's steady median (`measure.spread.median_step`: the warm-up
      step left out), the same step its tokens/s is computed from;
    - `peak_memory_bytes`: the largest peak over ranks (the rank that runs out first);
    - `bytes_sent_per_step`: the largest per-rank total over ranks divided by the number of steps.
    """
    rows = []
    for rec in as_records(records):
        losses = rec.get("losses") or []
        step_times = rec.get("step_time_s") or []
        n_steps = len(step_times) or len(losses)
        peaks = [m["peak"] for m in (rec.get("memory") or {}).values() if m.get("peak") is not None]
        sent = [c.get("bytes_sent", 0) for c in (rec.get("comm") or {}).values()]
        parity = rec.get("parity")
        rows.append({
            "strategy": rec.get("strategy"),
            "mode": rec.get("mode"),
            "profile": rec.get("profile"),
            "source": source_kind(rec),
            "source_label": source_label(rec),
            "world_size": rec.get("world_size"),
            "dims": format_dims(rec.get("dims")),
            "final_loss": losses[-1] if losses else None,
            "median_step_time_s": median_step(rec),
            "tokens_per_s": rec.get("tokens_per_s"),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "bytes_sent_per_step": max(sent) / n_steps if sent and n_steps else None,
            "parity_ok": parity.get("ok") if isinstance(parity, dict) else None,  # str: shape mode
        })
    return rows


def format_summary(records: Record | Sequence[Record]) -> str:
    """`table_summary` as a fixed-width text table (what `mgpukit run` and `tour` print)."""
    rows = table_summary(records)
    ws = max([len("strategy")] + [len(r["strategy"]) for r in rows])  # columns fit their longest entry
    wl = max([len("source")] + [len(r["source_label"]) for r in rows])
    header = f"{'strategy':<{ws}} {'source':<{wl}} {'ranks':>5} {'final loss':>10} {'step':>9} " \
             f"{'tokens/s':>10} {'peak MiB':>9} {'MB sent/step':>12} {'parity':>7}"
    lines = [header, "-" * len(header)]

    def fmt(v, spec):
        return format(v, spec) if v is not None else "-"

    for r in rows:
        parity = {True: "ok", False: "FAIL", None: "-"}[r["parity_ok"]]
        peak = r["peak_memory_bytes"] / 2**20 if r["peak_memory_bytes"] is not None else None
        sent = r["bytes_sent_per_step"] / 1e6 if r["bytes_sent_per_step"] is not None else None
        lines.append(f"{r['strategy']:<{ws}} {r['source_label']:<{wl}} {r['world_size']:>5} "
                     f"{fmt(r['final_loss'], '.4f'):>10} {format_time(r['median_step_time_s']).replace('—', '-'):>9} "
                     f"{fmt(r['tokens_per_s'], '.0f'):>10} {fmt(peak, '.2f'):>9} {fmt(sent, '.3f'):>12} "
                     f"{parity:>7}")
    return "\n".join(lines)
