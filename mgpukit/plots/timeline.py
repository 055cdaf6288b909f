"""Where the time goes: the per-rank Gantt timeline and the pipeline bubble.

The Gantt is drawn with horizontal `go.Bar`s whose `base` is the start time and whose length
is the duration — one trace per kind, so a few thousand events stay fast and every kind keeps
its colour from `KIND_COLORS`. (plotly.express.timeline would need datetimes.) Communication
that crossed nodes (`"inter_node": True`) gets its own trace per kind, "all_reduce · inter-node",
in `INTER_NODE_COLOR`, hatched: on real clusters that is the slow link.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from .layout import finish
from .style import (INTER_NODE_COLOR, KIND_COLORS, PREDICTED, Record, kind_color, percent, record_name, source_kind,
                    source_label, time_unit)

# Text drawn on a bar that carries a micro-batch: "F3" = forward of micro-batch 3.
# Zero-bubble schedules split backward into B (input gradient) and W (weight gradient).
_LETTERS = {"fwd": "F", "bwd": "B", "bwd_input": "B", "bwd_weight": "W", "send": "S", "recv": "R"}
_STREAM_ORDER = {"host": 0, "compute": 1, "comm": 2}  # emulated GPUs: the host issues, the streams run


def plot_timeline(record: Record, *, step: int | None = None) -> go.Figure:
    """Per-rank Gantt chart of `record["timeline"]`: rows "rank r · compute" / "rank r · comm".

    `step` keeps only the events of that step. Idle time shows as a gap, or as a light bar
    where the run recorded explicit "idle" or "wait" events (emulated: the stream waiting for a
    collective inside a region, e.g. DDP's last bucket inside backward; a pipeline's receive
    waiting for its message to be sent). Emulated GPU profiles add a "host" row per rank: the
    host issuing each region's kernels ("launch" bars).
    """
    events = list(record.get("timeline") or [])
    if step is not None:
        steps = sorted({e.get("step") for e in events if e.get("step") is not None})
        events = [e for e in events if e.get("step") == step]
        if not events:
            raise ValueError(f"no timeline events for step {step}; steps present: {steps}")

    rows = sorted({(e["rank"], e.get("stream", "compute")) for e in events},
                  key=lambda rs: (rs[0], _STREAM_ORDER.get(rs[1], 2), rs[1]))
    row_names = [f"rank {r} · {s}" for r, s in rows]
    span = max((e["end"] for e in events), default=0.0) - min((e["start"] for e in events), default=0.0)
    mult, unit = time_unit(span)

    by_kind: dict[tuple[str, bool], list[Mapping[str, Any]]] = {}
    for e in _split_receives(events):
        by_kind.setdefault((e["kind"], bool(e.get("inter_node"))), []).append(e)
    order = {k: i for i, k in enumerate(KIND_COLORS)}
    kinds = sorted(by_kind, key=lambda ki: (ki[0] not in order, order.get(ki[0], 0), ki[0], ki[1]))

    fig = go.Figure()
    for kind, inter in kinds:
        evs = by_kind[(kind, inter)]
        idle = kind in ("idle", "wait")
        name = f"{kind} · inter-node" if inter else kind
        marker = dict(color=INTER_NODE_COLOR if inter else kind_color(kind), opacity=0.45 if idle else 1.0,
                      line=dict(width=0.5, color="white"))
        if inter:
            marker["pattern"] = dict(shape="/", fgcolor="white", solidity=0.2)
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=[f"rank {e['rank']} · {e.get('stream', 'compute')}" for e in evs],
                base=[e["start"] * mult for e in evs],
                x=[(e["end"] - e["start"]) * mult for e in evs],
                text=None if idle else [_bar_text(e) for e in evs],
                textposition="inside",
                insidetextanchor="middle",
                name=name,
                marker=marker,
                customdata=[_hover_text(e, mult, unit) for e in evs],
                hovertemplate=f"<b>{name}</b> · %{{y}}<br>%{{customdata}}<extra></extra>",
            )
        )

    emulated = source_kind(record) == "emulated"
    at = f" · step {step}" if step is not None else ""
    title = f"Step timeline · {record_name(record)}{at} — {source_label(record)}"
    fig.update_layout(
        barmode="overlay",
        bargap=0.25,
        xaxis_title=f"time ({unit}) since launch start — {'virtual clock' if emulated else 'wall clock'}",
        yaxis=dict(categoryorder="array", categoryarray=row_names, autorange="reversed"),
        uniformtext=dict(minsize=8, mode="hide"),
        legend_title_text="kind",
    )
    # every kind stays visible in the legend: the plot is at least as tall as the legend
    return finish(fig, title=title, subtitle=_bubble_note(record), legend="right",
                  plot_height=40 + 36 * len(rows))


def _split_receives(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """An emulated receive runs from when its stream asks for the message to when the message
    arrives; most of that is waiting for the sender (a pipeline stage still computing), not the
    link. Draw the message's own time on the link (``wire_s``) as the receive and what comes
    before it as a wait, so a pipeline's communication row does not look busy while it idles."""
    out = []
    for e in events:
        wire = e.get("wire_s")
        if e["kind"] != "recv" or wire is None or e["end"] - e["start"] <= wire:
            out.append(e)
            continue
        arrives = e["end"] - wire
        out.append({**e, "kind": "wait", "end": arrives, "microbatch": None})
        out.append({**e, "start": arrives})
    return out


def _bar_text(event: Mapping[str, Any]) -> str:
    mb = event.get("microbatch")
    if mb is None:
        return ""
    return f"{_LETTERS.get(event['kind'], '')}{mb}"


def _hover_text(event: Mapping[str, Any], mult: float, unit: str) -> str:
    # Preformatted: plotly would print "null" for a missing micro-batch or stage.
    where = [f"{name} {event[key]}" for key, name in
             (("microbatch", "micro-batch"), ("stage", "stage"), ("step", "step"))
             if event.get(key) is not None]
    start, end = event["start"] * mult, event["end"] * mult
    when = f"{start:.4g} → {end:.4g} {unit} ({end - start:.4g} {unit})"
    return "<br>".join([" · ".join(where), when] if where else [when])


def _bubble_note(record: Record) -> str:
    parts = []
    if record.get("bubble_fraction") is not None:
        parts.append(f"bubble {record['bubble_fraction']:.1%} ({source_kind(record)})")
    split = record.get("idle_split")
    if split:
        parts.append(f"{percent(split['schedule'])} schedule + {percent(split['imbalance'])} imbalance "
                     f"+ {percent(split['p2p'])} p2p")
    predicted = (record.get("theory") or {}).get("bubble_fraction")
    if predicted is not None:
        parts.append(f"predicted bubble {predicted:.1%}")
    parts.append("gaps = idle")
    return " · ".join(parts)


def plot_bubble(
    ms: Sequence[int],
    measured: Sequence[float | None],
    predicted: Sequence[float] | Callable[[int], float] | None = None,
    *,
    title: str = "Pipeline bubble vs micro-batches",
    source: str = "measured",
) -> go.Figure:
    """Bubble fraction vs number of micro-batches: measured (or emulated) points, predicted curve.

    `source` names where the points come from, e.g. `source_label(record)` of the runs;
    `predicted` is a list aligned with `ms` or a function m -> fraction, such as
    `lambda m: (p - 1) / (m + p - 1)` for GPipe/1F1B with p stages.
    """
    ms = list(ms)
    measured = [float("nan") if v is None else float(v) for v in measured]
    if len(measured) != len(ms):
        raise ValueError(f"{len(measured)} measured values for {len(ms)} micro-batch counts")
    fig = go.Figure()
    if predicted is not None:
        if callable(predicted):
            xs = list(range(min(ms), max(ms) + 1))
            ys = [float(predicted(m)) for m in xs]
        else:
            xs, ys = ms, [float(v) for v in predicted]
        fig.add_trace(
            go.Scatter(x=xs, y=ys, name=PREDICTED, mode="lines", line=dict(color="#333333", dash="dash"),
                       hovertemplate="m=%{x}<br>predicted %{y:.1%}<extra></extra>")
        )
    fig.add_trace(
        go.Scatter(x=ms, y=measured, name=source, mode="markers",
                   marker=dict(size=10, color=KIND_COLORS["fwd"]),
                   hovertemplate=f"m=%{{x}}<br>{source} %{{y:.1%}}<extra></extra>")
    )
    fig.update_layout(
        xaxis_title="micro-batches per step (m)",
        yaxis=dict(title="bubble fraction", tickformat=".0%", rangemode="tozero"),
    )
    return finish(fig, title=f"{title} — {source}" + (" vs predicted" if predicted is not None else ""))
