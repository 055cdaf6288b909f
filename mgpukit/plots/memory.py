"""Memory figures (notebook 07): predicted bytes per GPU by category, and what activation
checkpointing saves and costs, measured.

- `plot_memory_breakdown(rows, title)`: stacked bars of *predicted* bytes per GPU by category
  (params, grads, optimizer, activations) for each layout of `lessons.memory.memory_table`,
  with the usable memory of the GPU as a line.
- `plot_activation_sweep(rows, x=)`: measured activation bytes beside the cost model's, against
  sequence length or batch.
- `plot_checkpointing_trade(rows, emulated_s)`: measured activation peak against emulated step time, each
  relative to no checkpointing.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.costmodel.memory import CATEGORIES

from .layout import finish
from .style import PREDICTED, series_color


def plot_memory_breakdown(rows: list[dict], *, title: str = "") -> go.Figure:
    """Stacked GB per GPU by category for each layout row (rows that cannot run are left out)."""
    ok = [r for r in rows if "error" not in r]
    names = [r["layout"] + (" ✓" if r["fits"] else " ✗") for r in ok]
    fig = go.Figure()
    for i, cat in enumerate(CATEGORIES):
        fig.add_trace(go.Bar(x=names, y=[r[cat] / 1e9 for r in ok], name=cat, marker_color=series_color(i)))
    if ok:
        fig.add_hline(y=ok[0]["usable"] / 1e9, line_dash="dash",
                      annotation_text=f"usable: {ok[0]['usable'] / 1e9:.1f} GB")
    fig.update_layout(barmode="stack", title=f"{title} — {PREDICTED}", yaxis_title="GB per GPU",
                      legend_title="category")
    return fig


def plot_activation_sweep(rows: list[dict], *, x: str = "seq_len") -> go.Figure:
    """Measured activation bytes (markers) and the cost model's (lines) against `x`
    ("seq_len" at batch 8, or "batch" at the model's sequence length), one colour per policy:
    dashed for fused attention, dotted for the materialized s×s core when rows carry
    `predicted_materialized`."""
    other = "batch" if x == "seq_len" else "seq_len"
    fig = go.Figure()
    policies = list(dict.fromkeys(r["checkpointing"] for r in rows))
    for i, policy in enumerate(policies):
        pts = [r for r in rows if r["checkpointing"] == policy]
        # the value of the other axis most points share (batch 8, or the model's seq_len)
        held = max({r[other] for r in pts}, key=lambda v: sum(r[other] == v for r in pts))
        pts = [r for r in pts if r[other] == held]
        pts = sorted(pts, key=lambda r: r[x])
        xs = [r[x] for r in pts]
        fig.add_trace(go.Scatter(x=xs, y=[r["measured"] / 2**20 for r in pts], mode="markers",
                                 marker=dict(size=10, color=series_color(i)), name=f"{policy}: measured"))
        fig.add_trace(go.Scatter(x=xs, y=[r["predicted"] / 2**20 for r in pts], mode="lines",
                                 line=dict(dash="dash", color=series_color(i)),
                                 name=f"{policy}: {PREDICTED}, fused attention"))
        if all("predicted_materialized" in r for r in pts):
            fig.add_trace(go.Scatter(x=xs, y=[r["predicted_materialized"] / 2**20 for r in pts], mode="lines",
                                     line=dict(dash="dot", color=series_color(i)),
                                     name=f"{policy}: {PREDICTED}, s×s attention stored"))
    fig.update_layout(title=f"activation memory vs {x} ({other} fixed) — measured vs predicted",
                      xaxis_title=x, yaxis_title="MiB (peak, saved for backward)")
    return fig


def plot_checkpointing_trade(rows: list[dict], emulated_s: dict[str, float]) -> go.Figure:
    """Measured activation peak (rows of `lessons.memory.measure_checkpointing`) against the
    emulated step time (`emulated_s`: seconds per checkpointing policy), both relative to no
    checkpointing. The CPU's wall clock is not used: a recompute of a few percent is below its noise."""
    fig = go.Figure()
    xs = [emulated_s[r["checkpointing"]] / emulated_s["none"] for r in rows]
    ys = [r["activations_vs_none"] for r in rows]
    for i, (r, x, y) in enumerate(zip(rows, xs, ys)):
        fig.add_trace(go.Scatter(x=[x], y=[y], mode="markers+text",
                                 text=[r["checkpointing"]], textposition="middle right", cliponaxis=False,
                                 textfont=dict(size=13), marker=dict(size=14, color=series_color(i)),
                                 name=r["checkpointing"]))
    pad_x = 0.15 * max(max(xs) - min(xs), 0.5)
    fig.update_layout(xaxis=dict(title="step time / step time without checkpointing (emulated H100)",
                                 range=[min(xs) - pad_x, max(xs) + 2 * pad_x]),
                      yaxis=dict(title="activation peak / without checkpointing (measured)",
                                 range=[0, max(1.0, max(ys)) * 1.15]))
    return finish(fig, title="checkpointing's trade — activations measured (1 CPU worker), time emulated (H100)",
                  legend="none")
