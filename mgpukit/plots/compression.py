"""Gradient-compression figures (notebook 03): bytes per step against the top-k ratio, step
time per method, and step time against link bandwidth. Each takes data, returns a plotly
Figure, and says in its title whether the numbers are predicted, measured or emulated.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.config import RunConfig
from mgpukit.costmodel.profile import Link
from mgpukit.strategies.compression import theory
from mgpukit.studies.compression import DEFAULT_BETAS, breakeven_label, median_step_time, step_time_curves

from .layout import finish
from .style import PREDICTED, series_color, source_label


def plot_bytes_vs_ratio(cfg: RunConfig, workers: int, ratio: float) -> go.Figure:
    """Predicted bytes one rank sends per step: top-k as a function of its ratio (log-log),
    the fixed-size methods as horizontal lines, a ◆ at `ratio`."""
    shapes = theory.param_shapes(cfg)
    n = workers
    ratios = [10 ** (-4 + 4 * i / 80) for i in range(81)]
    topk = [theory.plan_bytes(theory.exchange_plan("topk", shapes, n, ratio=r), n) for r in ratios]
    at = theory.plan_bytes(theory.exchange_plan("topk", shapes, n, ratio=ratio), n)
    dense = theory.plan_bytes(theory.exchange_plan("fp32", shapes, n), n)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ratios, y=topk, name="top-k (all-gather of values + indices)",
                             mode="lines", line=dict(color=series_color(0))))
    for i, method in enumerate(("fp32", "fp16", "int8", "powersgd"), start=1):
        b = theory.plan_bytes(theory.exchange_plan(method, shapes, n), n)
        fig.add_trace(go.Scatter(x=[ratios[0], ratios[-1]], y=[b, b], mode="lines", name=method,
                                 line=dict(color=series_color(i), dash="dot" if i > 1 else "solid")))
    fig.add_trace(go.Scatter(x=[ratio], y=[at], mode="markers", name=f"ratio {ratio:.3g}",
                             marker=dict(symbol="diamond", size=12, color="black"),
                             hovertemplate=f"{at:,.0f} B per step ({dense / at:.1f}× fewer than fp32)"
                                           "<extra></extra>"))
    fig.update_layout(
        xaxis=dict(title="top-k ratio (fraction of gradient entries sent)", type="log"),
        yaxis=dict(title="bytes sent per rank per step", type="log"),
    )
    return finish(fig, title=f"Bytes sent per rank per step — {PREDICTED}",
                  subtitle=f"{cfg.model}, {n} workers · top-k at {ratio:.3g}: "
                           f"{at:,.0f} B vs fp32 {dense:,.0f} B ({dense / at:.1f}×) · "
                           f"top-k sends more than fp32 above ratio ≈ 1/n = {1 / n:.2g}")


def plot_step_time(records: list[dict], *, skip: int = 2) -> go.Figure:
    """Median step time per strategy, one group of bars per source (profile or device)."""
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(source_label(rec), []).append(rec)
    scale = 1e6 if max(median_step_time(r, skip=skip) for r in records) < 1e-3 else 1e3
    unit = "µs" if scale == 1e6 else "ms"
    fig = go.Figure()
    for i, (label, recs) in enumerate(groups.items()):
        base = next((median_step_time(r, skip=skip) for r in recs if r["strategy"] == "ddp"), None)
        ys = [median_step_time(r, skip=skip) for r in recs]
        fig.add_trace(go.Bar(
            x=[r["strategy"] for r in recs], y=[y * scale for y in ys], name=label,
            marker_color=series_color(i),
            text=[f"{base / y:.1f}× vs ddp" if base else "" for y in ys], textposition="outside",
            hovertemplate=f"%{{x}}<br>%{{y:.3g}} {unit} per step<extra>{label}</extra>"))
    kinds = sorted({r["mode"] for r in records})
    fig.update_layout(barmode="group", yaxis_title=f"step time ({unit})")
    return finish(fig, title=f"Step time by compression method — {', '.join(kinds)}",
                  subtitle=f"median over steps ≥ {skip}; "
                           "speed-up relative to fp32 ddp on the same source")


def plot_step_time_vs_bandwidth(fast: list[dict], link: Link, *, alpha: float | None = None,
                                betas=None, points=None, skip: int = 2) -> go.Figure:
    """Predicted step time vs link bandwidth β for each method, from one emulated run per method
    (`step_time_curves`). `points` [(record, β)] — runs emulated on other profiles — are drawn
    as ◆ at their β. The subtitle gives, for each method, the bandwidth below which it beats the
    fp32 `ddp` record."""
    betas = betas or DEFAULT_BETAS
    alpha = link.alpha if alpha is None else alpha
    curves = step_time_curves(fast, link, alpha=alpha, betas=betas, skip=skip)
    scale = 1e6 if max(max(ys) for ys in curves.values()) < 1e-3 else 1e3
    unit = "µs" if scale == 1e6 else "ms"
    fig = go.Figure()
    for i, (name, ys) in enumerate(curves.items()):
        fig.add_trace(go.Scatter(
            x=[b / 1e9 for b in betas], y=[y * scale for y in ys], mode="lines", name=name,
            line=dict(color=series_color(i)), legendgroup=name,
            hovertemplate=f"β %{{x:.3g}} GB/s<br>%{{y:.3g}} {unit} per step<extra>" + name + "</extra>"))
    names = list(curves)
    for rec, beta in points or []:
        i = names.index(rec["strategy"])
        fig.add_trace(go.Scatter(
            x=[beta / 1e9], y=[median_step_time(rec, skip=skip) * scale], mode="markers",
            marker=dict(symbol="diamond", size=11, color=series_color(i)),
            legendgroup=rec["strategy"], showlegend=False,
            hovertemplate=f"{rec['strategy']}: {source_label(rec)}<br>%{{y:.3g}} {unit}<extra></extra>"))
    pays = ", ".join(f"{k} {breakeven_label(curves[k], curves.get('ddp'), betas)}" for k in names if k != "ddp")
    fig.update_layout(
        xaxis=dict(title="link bandwidth β (GB/s, per GPU, one direction)", type="log"),
        yaxis=dict(title=f"step time ({unit})", type="log"),
    )
    return finish(fig, title=f"Step time vs link bandwidth — {PREDICTED} from emulated compute"
                             + ("; ◆ emulated runs" if points else ""),
                  subtitle=f"α = {alpha * 1e6:.3g} µs per hop · "
                           f"≥ 10 % faster than ddp below: {pays}")
