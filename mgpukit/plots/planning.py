"""Notebook 09's planning figures, every one the planner's prediction (`mgpukit.costmodel`) set
against its error band: layouts ranked with their bands, days vs dollars by cluster size, and the
planner's error on each published run. The rows come from `mgpukit.lessons.plan_views`.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.plots.layout import finish
from mgpukit.plots.style import series_color


def plot_ranked(ranked: list[dict], band: str) -> go.Figure:
    """Each layout's predicted step with its band as an error bar; near-limit layouts in orange."""
    names = [f"{r['rank']}. {r['layout']}" for r in ranked][::-1]
    fig = go.Figure()
    for flag, label, color in ((False, "fits with room", series_color(0)),
                               (True, "near the memory limit", series_color(1))):
        pick = [r for r in ranked[::-1] if r["near_limit"] == flag]
        fig.add_scatter(x=[r["step_s"] for r in pick], y=[f"{r['rank']}. {r['layout']}" for r in pick],
                        mode="markers", name=label, marker=dict(color=color, size=10),
                        error_x=dict(type="data", symmetric=False,
                                     array=[r["step_range"][1] - r["step_s"] for r in pick],
                                     arrayminus=[r["step_s"] - r["step_range"][0] for r in pick]))
    fig.add_vline(x=ranked[0]["step_range"][1], line_dash="dot", line_color="grey")  # T_1 · (1 + high)
    fig.update_layout(xaxis_title="step time, s (predicted)", yaxis=dict(categoryorder="array", categoryarray=names))
    ties = sum(r["tie"] for r in ranked)
    return finish(fig, title="Ranked layouts: predicted step with the planner's error band",
                  subtitle=f"dotted: #1's slowest end — {ties} of the {len(ranked) - 1} others predict a step left of it (a tie); "
                           f"band: {band}", legend="below", plot_height=40 * len(ranked) + 80)


def plot_cluster_sizes(sizes: list[dict], band: str) -> go.Figure:
    """Days vs dollars of the same run on more GPUs: each point the fastest fitting layout."""
    pts = [s for s in sizes if s["plan"] is not None]
    days_lo, days_hi = zip(*(s["ranges"]["days"] for s in pts))
    cost_lo, cost_hi = zip(*(s["ranges"]["cost"] for s in pts))
    fig = go.Figure(go.Scatter(
        x=[s["days"] for s in pts], y=[s["cost"] / 1e6 for s in pts], mode="markers+text+lines",
        text=[f"{s['gpus']:,} GPUs" for s in pts], textposition="top right", showlegend=False,
        error_x=dict(type="data", symmetric=False, array=[h - s["days"] for h, s in zip(days_hi, pts)],
                     arrayminus=[s["days"] - lo for lo, s in zip(days_lo, pts)]),
        error_y=dict(type="data", symmetric=False, array=[(h - s["cost"]) / 1e6 for h, s in zip(cost_hi, pts)],
                     arrayminus=[(s["cost"] - lo) / 1e6 for lo, s in zip(cost_lo, pts)])))
    fig.update_layout(xaxis=dict(title="days to train (predicted)", type="log"),
                      yaxis_title="cost, million $ (predicted)")
    return finish(fig, title="Days vs dollars: the same run on more GPUs",
                  subtitle=f"each point the fastest fitting layout at that size; bars: {band}")


def plot_planner_errors(rows: list[dict], bar, profiles: list[str]) -> go.Figure:
    """The planner's optimism on each published run (`lessons.plan_views.error_rows`), its error
    bar ``bar`` (`costmodel.error_bars.error_bar`) shaded; ``profiles``: the GPUs the bar rests on."""
    fig = go.Figure()
    fig.add_hrect(y0=bar.low, y1=bar.high, fillcolor="lightgrey", opacity=0.4, line_width=0)
    for i, fw in enumerate(dict.fromkeys(r["framework"] for r in rows)):
        pick = [r for r in rows if r["framework"] == fw]
        fig.add_scatter(x=[r["name"] for r in pick], y=[r["error"] for r in pick], mode="markers", name=fw,
                        marker=dict(color=series_color(i), size=10,
                                    symbol=["circle" if r["gpu"] == "a100" else "diamond" for r in pick]),
                        hovertext=[r["note"] for r in pick])
    fig.add_hline(y=0, line_color="grey")
    fig.update_layout(yaxis=dict(title="planner optimism (predicted / published − 1)", tickformat="+.0%"),
                      xaxis=dict(tickangle=-45))
    return finish(fig, title="The planner against published runs: predicted vs published",
                  subtitle=f"grey band: {bar.describe()}, all on {', '.join(profiles)}; "
                           "diamonds: H100 runs; 'layout guessed': the paper gives no layout, the planner's own",
                  legend="below")
