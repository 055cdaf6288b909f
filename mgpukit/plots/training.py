"""Figures of a training run's outcome: loss parity, speedup and memory per rank.

Each function takes result records (docs/ARCHITECTURE.md, "The result record") and returns a
plotly Figure whose title says whether its numbers were measured, emulated or predicted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from .layout import finish
from .style import (
    MEMORY_CATEGORIES,
    MEMORY_COLORS,
    PREDICTED,
    Record,
    as_records,
    byte_unit,
    series_color,
    series_names,
    source_kind,
    source_label,
    sources_title,
)


# --------------------------------------------------------------------------- loss parity


def plot_loss_parity(records: Record | Sequence[Record]) -> go.Figure:
    """Loss per step of each record on one chart (e.g. single-process vs ddp).

    Curves that lie on top of each other are the point: a parallel strategy must compute the
    same loss as the single-process reference. The subtitle quotes each record's parity check.
    """
    records = as_records(records)
    names = series_names(records, with_source=True)
    fig = go.Figure()
    for i, (rec, name) in enumerate(zip(records, names)):
        losses = list(rec.get("losses") or [])
        fig.add_trace(
            go.Scatter(
                x=list(range(len(losses))),
                y=losses,
                name=name,
                mode="lines+markers" if len(losses) <= 50 else "lines",
                # Later curves dashed so a curve hidden under another still shows.
                line=dict(color=series_color(i), dash="solid" if i == 0 else "dash"),
                hovertemplate=f"{name}<br>step %{{x}}<br>loss %{{y:.6g}}<extra></extra>",
            )
        )
    fig.update_layout(xaxis_title="step", yaxis_title="loss", hovermode="x unified")
    return finish(fig, title=f"Loss per step — {sources_title(records)}",
                  subtitle=" · ".join(_parity_notes(records)), legend="below")


def _parity_notes(records: Sequence[Record]) -> list[str]:
    notes = []
    for rec, name in zip(records, series_names(records, with_source=False)):
        parity = rec.get("parity")
        if not isinstance(parity, dict):  # none, or "n/a (shape mode)"
            continue
        diff = parity.get("max_abs_diff", parity.get("losses_max_abs_diff"))
        verdict = "ok" if parity.get("ok") else "FAILED"
        rtol = (parity.get("tolerance") or {}).get("rtol")
        if "final_rel_gap" in parity and rtol is not None:  # a lossy method: judged on its final loss, not on Δ
            # "outside", not "FAILED": a run that shows what a method costs (03's top-k without
            # error feedback) is meant to land outside, and the word reads as a broken notebook
            notes.append(f"{name}: final loss {parity['final_rel_gap']:.1%} from "
                         f"{parity.get('reference', 'reference')}'s ({'within' if parity.get('ok') else 'outside'} "
                         f"the {rtol:.0%} tolerance)")
            continue
        diff_text = f"{diff:.2e}" if isinstance(diff, (int, float)) else "n/a"
        notes.append(
            f"{name}: max |Δ| vs {parity.get('reference', 'reference')} = "
            f"{diff_text} ({verdict})"
        )
    return notes


# --------------------------------------------------------------------------- speedup


def plot_speedup(
    records: Sequence[Record],
    *,
    baseline: Record | float | None = None,
    theory: Mapping[int | str, float] | None = None,
) -> go.Figure:
    """Speedup vs world size: tokens/s of each record divided by tokens/s of one worker.

    Records are grouped into one line per (strategy, source). The 1-worker throughput is
    `baseline` (a record or a tokens/s number) when given, else the 1-worker record of the same
    source (same strategy preferred, e.g. "single"). A measured line is never divided by an
    emulated baseline. `theory` maps world size -> predicted speedup (cost model). A point whose
    record carries a flag (`record["flags"]`, `measure.bounds`: faster than the workers allow) is
    circled in red with the flag's message.
    """
    records = as_records(records)
    groups: dict[tuple[str, str], list[Record]] = {}
    for rec in records:
        groups.setdefault((rec.get("strategy", "?"), source_label(rec)), []).append(rec)
    # A group made only of 1-worker runs (e.g. "single") is a baseline, not a line of its own.
    if any(r.get("world_size", 1) > 1 for r in records):
        groups = {k: g for k, g in groups.items() if any(r.get("world_size", 1) > 1 for r in g)}

    fig = go.Figure()
    max_ws = 1
    flagged = []  # (workers, speedup, message) of points that break a physical bound
    for i, ((strategy, label), group) in enumerate(groups.items()):
        base_tps = _baseline_tokens_per_s(strategy, label, records, baseline)
        flagged += [(r["world_size"], r["tokens_per_s"] / base_tps, f["message"])
                    for r in group for f in r.get("flags", [])]
        points = sorted(((r["world_size"], r["tokens_per_s"]) for r in group), key=lambda p: p[0])
        if points[0][0] != 1:
            points.insert(0, (1, base_tps))
        ws = [p[0] for p in points]
        max_ws = max(max_ws, ws[-1])
        fig.add_trace(
            go.Scatter(
                x=ws,
                y=[tps / base_tps for _, tps in points],
                customdata=[tps for _, tps in points],
                name=f"{strategy} — {label}",
                mode="lines+markers",
                line=dict(color=series_color(i)),
                hovertemplate="%{x} workers<br>speedup %{y:.2f}×<br>%{customdata:,.0f} tokens/s<extra></extra>",
            )
        )
    if flagged:  # measure/bounds.py: shown, but marked as an artefact, not a finding
        fig.add_trace(
            go.Scatter(
                x=[f[0] for f in flagged], y=[f[1] for f in flagged], text=[f[2] for f in flagged],
                name="⚠ breaks a physical bound", mode="markers",
                marker=dict(symbol="x-open", size=14, color="#d62728", line=dict(width=2)),
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[1, max_ws], y=[1, max_ws], name="ideal (linear)", mode="lines",
            line=dict(color="#999999", dash="dot"), hoverinfo="skip",
        )
    )
    if theory:
        pred = sorted((int(k), float(v)) for k, v in theory.items())
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pred], y=[p[1] for p in pred], name=PREDICTED,
                mode="lines+markers", line=dict(color="#333333", dash="dash"),
                marker=dict(symbol="x"),
                hovertemplate="%{x} workers<br>predicted %{y:.2f}×<extra></extra>",
            )
        )
    title = f"Speedup vs workers — {sources_title(records)}" + (" vs predicted" if theory else "")
    counts = sorted({1, *(r.get("world_size", 1) for r in records), *(int(k) for k in (theory or {}))})
    # 1 … 256 workers on a linear axis crowd 1–16 into a corner: log axes past 16 workers
    log = max(counts) >= 16
    fig.update_layout(
        xaxis=dict(title="workers (world size)" + (", log scale" if log else ""), tickmode="array",
                   tickvals=counts, type="log" if log else "linear"),
        yaxis=dict(title="speedup (×)" + (", log scale" if log else ""), type="log" if log else "linear"),
    )
    return finish(fig, title=title, subtitle="tokens/s relative to one worker")


def _baseline_tokens_per_s(strategy: str, label: str, records: Sequence[Record],
                           baseline: Record | float | None) -> float:
    if isinstance(baseline, Mapping):
        return float(baseline["tokens_per_s"])
    if baseline is not None:
        return float(baseline)
    ones = [r for r in records if r.get("world_size") == 1 and source_label(r) == label]
    same = [r for r in ones if r.get("strategy") == strategy]
    if not (same or ones):
        raise ValueError(
            f"no 1-worker record {label} to compare {strategy!r} with; "
            "add one to `records` or pass baseline=<record or tokens/s>"
        )
    return float((same or ones)[0]["tokens_per_s"])


# --------------------------------------------------------------------------- memory


def plot_memory(
    record_or_records: Record | Sequence[Record],
    *,
    theory: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
) -> go.Figure:
    """Memory per rank as stacked bars (params, grads, optimizer, activations), peak as a ◆.

    `theory` adds predicted bars next to each rank's bars: a dict of categories (same for every
    rank), a dict rank -> categories, or a list of those aligned with the records.
    """
    records = as_records(record_or_records)
    theories = _theory_per_record(theory, len(records))
    prefixes = [""] if len(records) == 1 else [n + " · " for n in series_names(records, with_source=False)]

    # bars[(category, source)] = (x labels, bytes); one trace per key keeps the legend short.
    bars: dict[tuple[str, str], tuple[list[str], list[float]]] = {}
    peaks: dict[str, tuple[list[str], list[float]]] = {}
    x_order: list[str] = []

    unpredicted: list[str] = []  # categories a theory leaves out: not drawn as a 0 bar

    def add(x: str, cats: Mapping[str, Any], src: str) -> None:
        x_order.append(x)
        for cat in MEMORY_CATEGORIES:
            if src == "predicted" and cats.get(cat) is None:
                if cat not in unpredicted:
                    unpredicted.append(cat)
                continue
            xs, ys = bars.setdefault((cat, src), ([], []))
            xs.append(x)
            ys.append(float(cats.get(cat) or 0))
        if cats.get("peak") is not None:
            xs, ys = peaks.setdefault(src, ([], []))
            xs.append(x)
            ys.append(float(cats["peak"]))

    for rec, prefix, pred in zip(records, prefixes, theories):
        memory = rec.get("memory") or {}
        for rank in sorted(memory, key=int):
            cats = memory[rank]
            src = cats.get("source") or source_kind(rec)   # measured / emulated / predicted, never a fourth word
            add(f"{prefix}rank {rank}", cats, src)
            if pred is not None:
                add(f"{prefix}rank {rank} · predicted", _theory_for_rank(pred, rank), "predicted")

    top = max([max(ys, default=0.0) for _, ys in peaks.values()] + [_max_stack(bars)])
    scale, unit = byte_unit(top)

    fig = go.Figure()
    for (cat, src), (xs, ys) in bars.items():
        fig.add_trace(
            go.Bar(
                x=xs, y=[y / scale for y in ys], customdata=ys, name=f"{cat} — {src}",
                legendgroup=src, marker=dict(
                    color=MEMORY_COLORS[cat],
                    pattern=dict(shape="/" if src == "predicted" else ""),
                    opacity=0.6 if src == "predicted" else 1.0,
                ),
                hovertemplate=f"%{{x}}<br>{cat} ({src}) %{{y:.3g}} {unit}<br>%{{customdata:,.0f}} B<extra></extra>",
            )
        )
    for src, (xs, ys) in peaks.items():
        fig.add_trace(
            go.Scatter(
                x=xs, y=[y / scale for y in ys], customdata=ys, name=f"peak — {src}",
                legendgroup=src, mode="markers",
                marker=dict(symbol="diamond", size=11, color="black" if src != "predicted" else "#777777"),
                hovertemplate=f"%{{x}}<br>peak ({src}) %{{y:.3g}} {unit}<br>%{{customdata:,.0f}} B<extra></extra>",
            )
        )
    title = f"Memory per rank — {sources_title(records)}" + (
        " vs predicted" if any(t is not None for t in theories) else "")
    fig.update_layout(
        barmode="stack",
        xaxis=dict(categoryorder="array", categoryarray=x_order),
        yaxis_title=f"memory ({unit})",
    )
    subtitle = "stacked: " + ", ".join(MEMORY_CATEGORIES) + " · ◆ peak"
    if unpredicted:
        subtitle += " · predicted bars leave out what the formulas do not model: " + ", ".join(unpredicted)
    return finish(fig, title=title, subtitle=subtitle)


def _max_stack(bars: Mapping[tuple[str, str], tuple[list[str], list[float]]]) -> float:
    totals: dict[str, float] = {}
    for xs, ys in bars.values():
        for x, y in zip(xs, ys):
            totals[x] = totals.get(x, 0.0) + y
    return max(totals.values(), default=0.0)


def _theory_per_record(theory: Any, n: int) -> list[Mapping[str, Any] | None]:
    if theory is None:
        return [None] * n
    if isinstance(theory, Mapping):
        return [theory] * n
    theories = list(theory)
    if len(theories) != n:
        raise ValueError(f"theory has {len(theories)} entries for {n} records; give one per record")
    return theories


def _theory_for_rank(theory: Mapping[str, Any], rank: str) -> Mapping[str, Any]:
    """Categories predicted for `rank`: a flat dict applies to every rank."""
    if any(cat in theory for cat in (*MEMORY_CATEGORIES, "peak")):
        return theory
    for key in (rank, str(rank), int(rank)):
        if key in theory:
            return theory[key]
    raise ValueError(f"theory has no entry for rank {rank}: keys are {sorted(theory)}")
