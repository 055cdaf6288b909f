"""The planner's figures (notebook 09's explorer, `mgpukit.widgets.planner`): every one the cost
model's prediction for one plan (`mgpukit.costmodel.plan`).

- `plot_plan_memory(plan)`: bytes per GPU stacked by category against the profile's usable memory.
- `plot_plan_step_time(plan)`: one step split into compute, exposed communication per axis (tp,
  pp, dp), pipeline bubble and optimizer.
- `plot_plan_speedup(rows)`: predicted speedup from 1 to 1,024 GPUs against the ideal line.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.plots.style import MEMORY_CATEGORIES, MEMORY_COLORS, PREDICTED, series_color


TIME_PARTS = (("GEMMs", "compute_s"), ("memory-bound kernels", "memory_s"), ("tp comm (exposed)", "comm_tp_s"),
              ("cp comm (exposed)", "comm_cp_s"), ("pp comm (exposed)", "comm_pp_s"),
              ("dp comm (exposed)", "comm_dp_s"), ("bubble", "bubble_s"), ("optimizer", "optimizer_s"),
              ("interference (hidden comm slowing compute)", "interference_s"),
              ("straggler (the slowest of N GPUs)", "straggler_s"))


GB = 1e9


TIME_COLORS = ("#4C78A8", "#9ECAE9", "#B279A2", "#F58518", "#FF9DA6", "#72B7B2", "#D9D9D9", "#54A24B",
               "#E45756", "#8C6D31")  # one per TIME_PARTS


def plot_plan_memory(pl) -> go.Figure:
    """One stacked bar, GB per GPU by category (fullest GPU), and the usable-memory line."""
    mem, limit = pl.memory, pl.memory_limit
    fig = go.Figure([go.Bar(x=[0], y=[mem[cat] / GB], name=cat, marker_color=MEMORY_COLORS[cat], width=0.5,
                            hovertemplate=f"{cat} %{{y:.1f}} GB<extra></extra>") for cat in MEMORY_CATEGORIES])
    fig.add_trace(go.Scatter(x=[-0.4, 0.4], y=[limit / GB, limit / GB], mode="lines", name="usable memory",
                             line=dict(color="black", dash="dash")))
    fig.update_layout(barmode="stack", yaxis_title="GB per GPU",
                      xaxis=dict(showticklabels=False, range=[-0.6, 0.6]),
                      **_titled(f"memory per GPU: {mem['total'] / GB:.1f} of {limit / GB:.1f} GB usable "
                                f"{'✓ fits' if pl.fits else '✗ does not fit'}",
                                f"fullest GPU, by category — {PREDICTED}", 420))
    return fig


def _titled(title: str, subtitle: str, height: int) -> dict:
    """Layout keys for a title with a smaller grey line under it, pinned to the top-left of the
    figure. The subtitle is a second line of the title (``<br><sup>``), not plotly's
    ``title.subtitle``: a FigureWidget in JupyterLab drew that one on top of, or above, the title
    (notebook 09's explorer, seen in Chromium), a plain figure below it. The block starts 40 px
    below the figure's top (some renderers anchor a two-line title at its first line and draw it
    ~15 px higher) inside a 100 px margin."""
    extra = 16 * subtitle.count("<br>")  # each further grey line (~16 px) widens the margin and the figure
    height += extra
    grey = "<br>".join(f"<sup style='color:#555'>{line}</sup>" for line in subtitle.split("<br>"))
    return {"title": dict(text=f"{title}<br>{grey}", x=0.01, xanchor="left",
                          xref="container", y=1 - 40 / height, yanchor="top", yref="container", font=dict(size=15)),
            "margin": dict(t=100 + extra), "height": height}


def _legend_height(entries: int) -> int:
    """A figure tall enough that its vertical legend (~22 px a row) fits beside the plot: the
    100 px title margin and ~90 px of axis below, then the rows (10 parts since the planner's
    interference and straggler terms; 360 px scrolled the legend in Chromium)."""
    return max(360, 190 + 22 * entries)


def plot_plan_step_time(pl) -> go.Figure:
    """One horizontal stacked bar: the step's compute, exposed comm per axis, bubble, optimizer;
    the title gives the step's and the MFU's ranges from the planner's error bar."""
    t = pl.time
    (t_lo, t_hi), (m_lo, m_hi) = pl.ranges["step_time_s"], pl.ranges["mfu"]
    fig = go.Figure([go.Bar(y=["step"], x=[t[key]], name=name, orientation="h", marker_color=color,
                            hovertemplate=f"{name} %{{x:.3g}} s<extra></extra>")
                     for (name, key), color in zip(TIME_PARTS, TIME_COLORS)])
    fig.update_layout(barmode="stack", xaxis_title="seconds per step",
                      legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"),
                      # every line short: the title block must fit the figure's width in Chromium
                      **_titled(f"one step: {pl.step_time_s:.3g} s · MFU {pl.mfu:.1%} · bubble "
                                f"{t['bubble_fraction']:.1%} · {t['tokens_per_s'] / pl.gpus:,.0f} tokens/s per GPU",
                                f"GEMMs, memory-bound kernels, exposed communication per axis, bubble, the slowest "
                                f"GPU's pace — {PREDICTED};<br>"
                                f"with the planner's error bar: step {t_lo:.3g} … {t_hi:.3g} s, "
                                f"MFU {m_lo:.1%} … {m_hi:.1%}",
                                _legend_height(len(TIME_PARTS))))
    return fig


def plot_plan_speedup(rows: list[dict], *, title: str = "") -> go.Figure:
    """Speedup vs GPUs (log-log): layouts that fit (filled) and that do not (open), ideal dotted."""
    ok = [r for r in rows if r["fits"]]
    bad = [r for r in rows if not r["fits"]]
    xs = [r["gpus"] for r in rows]
    fig = go.Figure([
        go.Scatter(x=xs, y=xs, mode="lines", name="ideal (N×)", line=dict(color="grey", dash="dot")),
        go.Scatter(x=[r["gpus"] for r in ok], y=[r["speedup"] for r in ok], mode="lines+markers", name="fits",
                   marker=dict(size=9), line=dict(color=series_color(0))),
        go.Scatter(x=[r["gpus"] for r in bad], y=[r["speedup"] for r in bad], mode="markers", name="does not fit",
                   marker=dict(size=9, symbol="circle-open", color=series_color(3))),
    ])
    fig.update_layout(xaxis=dict(title="GPUs", type="log", tickvals=sorted({r["gpus"] for r in rows})),
                      yaxis=dict(title="speedup over 1 GPU", type="log", dtick=1),  # decades only: no bare "2", "5"
                      **_titled(title or "speedup at the same global batch",
                                f"over one GPU running the whole step — {PREDICTED}", 420))
    return fig


