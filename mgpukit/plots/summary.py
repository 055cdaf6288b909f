"""One row of headline numbers per record, for tables in notebooks and the HTML report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .style import Record, as_records, format_dims, source_kind, source_label


def table_summary(records: Record | Sequence[Record]) -> list[dict[str, Any]]:
    """One dict per record; raw numbers (bytes, seconds), None where the record has no data.

    - `source`: "measured" | "emulated" | "predicted"; `source_label` says which device/profile;
    - `median_step_time_s`: the median ignores the warm-up step's outlier;
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
            "median_step_time_s": statistics.median(step_times) if step_times else None,
            "tokens_per_s": rec.get("tokens_per_s"),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "bytes_sent_per_step": max(sent) / n_steps if sent and n_steps else None,
            "parity_ok": parity.get("ok") if parity else None,
        })
    return rows
