"""Notebook 10's spot figure: what spot saves against the preemption rate (predicted, from
`mgpukit.costmodel.spot` through `mgpukit.lessons.spot_instances`)."""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.plots.layout import finish
from mgpukit.plots.style import series_color


def plot_savings(grid: list[dict], best: list[dict], spot_grid: dict, *, low: float = -0.5) -> go.Figure:
    """Savings vs preemption rate per discount (`lessons.spot_instances.spot_verdicts`' ``grid``):
    at the best checkpoint interval (``best``, solid) and at the rarest of ``spot_grid`` (dotted);
    the articles' 60 % dashed. Settings below ``low`` are off the axis."""
    rare = max(spot_grid["intervals_s"])
    fig = go.Figure()
    for i, d in enumerate(spot_grid["discounts"]):
        for pts, dash, name in (([r for r in best if r["discount"] == d], "solid", "best checkpoint interval"),
                                ([r for r in grid if r["discount"] == d and r["checkpoint_every_s"] == rare], "dot",
                                 f"checkpoint every {rare // 3600} h")):
            pts = sorted(pts, key=lambda r: r["preemptions_per_hour"])
            fig.add_scatter(x=[r["preemptions_per_hour"] for r in pts], y=[r["savings"] for r in pts],
                            mode="lines+markers" if dash == "solid" else "lines",
                            line=dict(color=series_color(i), dash=dash), name=f"discount {d:.0%}, {name}")
    fig.add_hline(y=0.6, line_dash="dash", line_color="grey")
    fig.update_layout(xaxis_title="preemptions per hour (of the whole job)",
                      yaxis=dict(title="savings vs on-demand", range=[low, 1], tickformat=".0%"))
    off = sum(r["savings"] < low for r in grid)
    return finish(fig, title="spot savings vs preemption rate (predicted; 60 s checkpoints, 5 min restarts)",
                  subtitle=f"dashed: the articles' 60 %; {off} settings lose more than {-low:.0%} and lie below the axis",
                  legend="below")
