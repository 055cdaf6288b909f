"""Pipeline figures (notebook 04): a schedule's predicted Gantt and the activations each rank holds.

- `predicted_record(name, p, m, v)`: a result record whose timeline is the schedule simulator's
  (``mgpukit.costmodel.simulate``: every stage costing the same — forward 1, backward 2;
  zero-bubble: input-grad 1, weight-grad 1 — and free messages), so it draws like a run.
- `plot_schedule(name, p, m, v)`: that *predicted* Gantt, drawn with ``plot_timeline`` like any
  measured run, labelled "predicted".
- `compute_only(record, step=)`: a record's compute events only, for a clean Gantt.
- `plot_in_flight(records)`: activations held per rank, measured, one bar group per run.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.costmodel.pipeline import bubble_fraction
from mgpukit.costmodel.schedules import build_schedule, max_in_flight
from mgpukit.costmodel.simulate import simulate

from .layout import finish, retitle
from .style import PREDICTED, format_bytes, series_color, source_label
from .timeline import plot_timeline


def predicted_record(name: str, p: int, m: int, v: int = 1) -> dict:
    """A result record (mode "analytic") whose timeline is the simulator's, for the plots."""
    table = build_schedule(name, p, m, v)
    tl = simulate(table, cost_f=1.0, cost_b=2.0)
    return {"strategy": f"{name}" + (f" v={v}" if v > 1 else "") + f" m={m}", "mode": "analytic",
            "profile": None, "world_size": p, "dims": {"dp": 1, "tp": 1, "pp": p},
            "timeline": [{**e, "step": 0} for e in tl.events],
            "bubble_fraction": tl.bubble_fraction,
            "theory": {"bubble_fraction": bubble_fraction(name, p, m, v),
                       "microbatches_in_flight": [max_in_flight(table, r) for r in range(p)]}}


def plot_schedule(name: str, p: int, m: int, v: int = 1) -> go.Figure:
    """Predicted per-rank Gantt of schedule ``name``; time in units of one stage's forward."""
    rec = predicted_record(name, p, m, v)
    fig = plot_timeline(rec)
    fig.update_layout(xaxis_title="time, in units of one stage's forward (backward = 2)")
    return retitle(fig, f"Schedule {rec['strategy']} on p={p} — {PREDICTED}",
                   f"schedule simulator: equal stages, free messages · bubble {rec['bubble_fraction']:.1%} "
                   f"(simulator), {rec['theory']['bubble_fraction']:.1%} (closed form) · gaps = idle")


def compute_only(record: dict, *, step: int | None = None) -> dict:
    """The record with only its compute events (of ``step``, if given): a cleaner Gantt when
    the messages are free, as in the lab."""
    keep = [e for e in record["timeline"] if e["stream"] == "compute"
            and (step is None or e.get("step") == step)]
    return {**record, "timeline": keep}


def plot_in_flight(records: list[dict]) -> go.Figure:
    """Peak activation memory held per rank (``ActivationMeter``), one bar group per record,
    each bar labelled with what it is worth in units of one forward's saved activations on that
    rank (its first stage's, or with v > 1 its first chunk's). The label need not be whole: the
    last stage also keeps its loss's inputs, and ZB-H1 after a `B` keeps only what its `W` needs."""
    fig = go.Figure()
    for i, rec in enumerate(records):
        ranks = sorted(rec["extra"], key=int)
        peaks = [rec["extra"][r]["activations_in_flight_peak"] for r in ranks]
        count = [rec["extra"][r].get("microbatches_in_flight_measured") for r in ranks]
        unit_bytes = [rec["extra"][r].get("activation_bytes_per_microbatch") for r in ranks]
        # the meter's unit is one forward's activations: a whole stage's, or with v > 1 one
        # chunk's (1/v of a stage) — say which on the bar, never call a chunk a micro-batch
        v = int(rec["extra"][ranks[0]].get("v") or (rec.get("theory") or {}).get("v") or 1)
        unit = "× a chunk's" if v > 1 else "× a micro-batch's"
        one = f"one chunk's (1/{v} stage)" if v > 1 else "one micro-batch's"
        # the number on the bar, its unit in the legend: "11.0 chunks" on a bar a quarter of a
        # rank's width was shrunk by plotly until unreadable
        fig.add_trace(go.Bar(
            x=[f"rank {r}" for r in ranks], y=[b / 1024 for b in peaks], name=f"{rec['strategy']} ({unit})",
            marker_color=series_color(i), text=[f"{c:.3g}" if c else "" for c in count],
            textposition="outside", textangle=0, cliponaxis=False, textfont=dict(size=15),
            hovertemplate=[f"{format_bytes(b)} = {c:.2f} × {format_bytes(u)}, {one} saved activations on this "
                           f"rank<extra>{rec['strategy']}</extra>" if c else "" for b, c, u in zip(peaks, count, unit_bytes)]))
    fig.update_layout(barmode="group", bargap=0.12, bargroupgap=0.04, yaxis_title="KiB", xaxis_title="pipeline rank",
                      uniformtext=dict(minsize=14, mode="show"))
    return finish(fig, title=f"Activations held per rank — measured bytes, {source_label(records[0])}",
                  subtitle="peak bytes saved for backward (ActivationMeter) · number on a bar: those bytes over one "
                           "forward's on that rank (a micro-batch's, or a chunk's of 1/v stage) — not always whole: "
                           "the last stage also keeps its loss's inputs, ZB-H1 keeps only W's after B")
