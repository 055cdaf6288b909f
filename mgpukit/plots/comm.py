"""Communication figures: bytes each rank sent, and bus bandwidth vs message size."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import plotly.graph_objects as go

from .layout import finish
from .style import PREDICTED, Record, as_records, byte_unit, series_color, series_names, sources_title


def plot_comm_bytes(records: Record | Sequence[Record], *, per_step: bool = False) -> go.Figure:
    """Bytes sent by each rank, one group of bars per rank, one bar per record.

    Totals are over the whole run (setup broadcasts included); `per_step=True` divides by the
    number of steps, which compares runs of different lengths.
    """
    records = as_records(records)
    names = series_names(records, with_source=True)
    values: list[tuple[list[str], list[float], list[str]]] = []
    for rec in records:
        comm = rec.get("comm") or {}
        steps = len(rec.get("step_time_s") or rec.get("losses") or [])
        if per_step and not steps:
            raise ValueError(f"record {names[len(values)]!r} has no steps to divide by; use per_step=False")
        div = steps if per_step else 1
        ranks = sorted(comm, key=int)
        values.append((
            [f"rank {r}" for r in ranks],
            [float(comm[r].get("bytes_sent", 0)) / div for r in ranks],
            [_collectives_text(comm[r].get("collectives") or {}) for r in ranks],
        ))
    scale, unit = byte_unit(max((max(v[1], default=0.0) for v in values), default=0.0))

    fig = go.Figure()
    for i, ((xs, ys, colls), name) in enumerate(zip(values, names)):
        fig.add_trace(
            go.Bar(
                x=xs, y=[y / scale for y in ys], customdata=colls, name=name,
                marker_color=series_color(i),
                hovertemplate=f"{name}<br>%{{x}}: %{{y:.3g}} {unit}<br>%{{customdata}}<extra></extra>",
            )
        )
    what = "per step" if per_step else "over the run"
    fig.update_layout(barmode="group", yaxis_title=f"bytes sent {what} ({unit})")
    return finish(fig, title=f"Bytes sent per rank — {sources_title(records)}", subtitle=what)


def _collectives_text(collectives: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ×{n}" for name, n in collectives.items()) or "no collectives"


def plot_bandwidth(
    sizes: Sequence[float],
    measured_bw: Sequence[float],
    fit: Mapping[str, float] | Sequence[float] | Callable[[float], float] | None = None,
    *,
    source: str = "measured",
    title: str = "Bus bandwidth vs message size",
    fit_label: str | None = None,
) -> go.Figure:
    """Log-log bus bandwidth (bytes/s) vs message size (bytes), with an optional alpha-beta fit.

    `fit` is {"alpha": seconds, "beta": bytes/s} — drawn as size / (alpha + size / beta): small
    messages pay the latency alpha, large ones approach beta — or a list aligned with `sizes`,
    or a function size -> bytes/s. `fit_label` names the line: a fit of measured times is
    not the same claim as the cost model's own prediction ("alpha-beta model", the default for
    a list or a function).
    """
    sizes = [float(s) for s in sizes]
    gbps = [float(b) / 1e9 for b in measured_bw]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=sizes, y=gbps, name=source, mode="markers+lines", marker=dict(size=8),
                   line=dict(color=series_color(0)),
                   hovertemplate="%{x:.3s}B<br>%{y:.3g} GB/s<extra></extra>")
    )
    fitted = isinstance(fit, Mapping) or "fit" in (fit_label or "")  # a fit describes the points: not a prediction
    if fit is not None:
        name = fit_label or f"alpha-beta model — {PREDICTED}"
        if isinstance(fit, Mapping):
            alpha, beta = float(fit["alpha"]), float(fit["beta"])
            name = fit_label or f"alpha-beta fit (α={alpha * 1e6:.3g} µs, β={beta / 1e9:.3g} GB/s) of the points"
            fn: Callable[[float], float] = lambda s: s / (alpha + s / beta)  # noqa: E731
        elif callable(fit):
            fn = fit
        else:
            fn = None
        if fn is not None:
            # A smooth curve: 60 sizes evenly spaced in log space across the measured range.
            lo, hi = math.log10(min(sizes)), math.log10(max(sizes))
            xs = [10 ** (lo + (hi - lo) * i / 59) for i in range(60)]
            ys = [fn(x) / 1e9 for x in xs]
        else:
            xs, ys = sizes, [float(b) / 1e9 for b in fit]
        fig.add_trace(
            go.Scatter(x=xs, y=ys, name=name, mode="lines", line=dict(color="#333333", dash="dash"),
                       hovertemplate=f"%{{x:.3s}}B<br>{'fitted' if fitted else 'predicted'} %{{y:.3g}} GB/s<extra></extra>")
        )
    fig.update_layout(
        xaxis=dict(title="message size (bytes)", type="log"),
        yaxis=dict(title="bus bandwidth (GB/s)", type="log"),
    )
    vs = "" if fit is None else " with an alpha-beta fit" if fitted else " vs predicted"
    return finish(fig, title=f"{title} — {source}{vs}")
