"""Notebook 05's figures: one transformer block under tp (and SP), step time vs tp degree, and
one step split into compute and tp communication over each link (its explorer's figure)."""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.plots.layout import finish
from mgpukit.plots.style import PREDICTED, series_color
from mgpukit.studies.tp_links import LINKS, predicted_tp_step, steady_step


_BLOCK = [  # (label, kind) left to right through one block; kind: "rep" | "split" | "comm"
    ("LayerNorm", "rep"), ("f", "comm"), ("q k v (column)", "split"), ("attention of my heads", "split"),
    ("o_proj (row)", "split"), ("g", "comm"), ("+ x", "rep"), ("LayerNorm", "rep"), ("f", "comm"),
    ("fc1 (column)", "split"), ("GELU", "split"), ("fc2 (row)", "split"), ("g", "comm"), ("+ x", "rep"),
]


def plot_block(sp: bool = False) -> go.Figure:
    """One transformer block on a tp rank: what is replicated, what is split, where the
    collectives sit in forward and backward (Megatron's f and g; with SP, their pairs)."""
    fwd = {"f": "all-gather" if sp else "—", "g": "reduce-scatter" if sp else "all-reduce"}
    bwd = {"f": "reduce-scatter" if sp else "all-reduce", "g": "all-gather" if sp else "—"}
    colors = {"rep": "#BAB0AC" if not sp else "#72B7B2", "split": "#4C78A8", "comm": "#E45756"}
    fig = go.Figure()
    for i, (label, kind) in enumerate(_BLOCK):
        fig.add_shape(type="rect", x0=i, x1=i + 0.9, y0=0, y1=1, fillcolor=colors[kind], line_width=0)
        fig.add_annotation(x=i + 0.45, y=0.5, text=label.replace(" ", "<br>"), showarrow=False,
                           font=dict(color="white", size=10))
        if kind == "comm":
            fig.add_annotation(x=i + 0.45, y=1.25, text=f"fwd: {fwd[label]}", showarrow=False, font_size=10)
            fig.add_annotation(x=i + 0.45, y=-0.25, text=f"bwd: {bwd[label]}", showarrow=False, font_size=10)
    rep = "T/t tokens (sequence-parallel)" if sp else "replicated on every tp rank"
    fig.update_layout(xaxis=dict(visible=False, range=[-0.1, len(_BLOCK)]),
                      yaxis=dict(visible=False, range=[-0.5, 1.5]))
    return finish(fig, title=f"one block, tensor parallel{' + sequence parallel' if sp else ''}",
                  subtitle=f"{'teal' if sp else 'grey'} = {rep}, blue = split by heads / columns, red = collective",
                  legend="none", plot_height=170)


def plot_tp_scaling(model: str = "gpt-tiny", tps=(1, 2, 4), emulated: list[dict] = ()) -> go.Figure:
    """Step time vs tp degree: the cost model per link (lines), emulated runs (markers, one
    symbol per link, so markers that coincide still show)."""
    fig = go.Figure()
    symbols = ("diamond", "square", "circle")
    for i, link in enumerate(LINKS):
        fig.add_trace(go.Scatter(x=list(tps), y=[predicted_tp_step(model, t, link)["total_s"] * 1e6 for t in tps],
                                 mode="lines", name=f"{link.split(' (')[0]}, {PREDICTED}",
                                 line=dict(color=series_color(i))))
        recs = [r for r in emulated if r.get("link") == link]
        if recs:
            clock = "kernels only" if recs[0].get("kernels_only") else "with host launches"
            fig.add_trace(go.Scatter(
                x=[r["layout"]["tp"] for r in recs], y=[steady_step(r) * 1e6 for r in recs],
                mode="markers", marker=dict(size=12 - 2 * i, symbol=symbols[i % 3], color=series_color(i),
                                            line=dict(width=1, color="black")),
                name=f"{link.split(' (')[0]}, emulated ({clock})"))
    fig.update_layout(xaxis=dict(title="tp degree", type="log", tickvals=list(tps)),
                      yaxis=dict(title="step time (µs)", rangemode="tozero"))  # linear from 0: a 24 % gap looks like one
    return finish(fig, title=f"{model}: step time vs tensor-parallel degree",
                  subtitle="lines: cost model (kernels and messages); markers: the virtual clock on the same "
                           "profile", legend="below")


def plot_tp_step_split(model: str, tp: int, rows: list[dict], links: list[str], *, batch: int, seq_len: int,
                       dtype: str) -> go.Figure:
    """One predicted step per link (`rows`: `studies.tp_links.predicted_tp_step` on each of
    `links`), stacked: GEMMs, memory-bound kernels and the optimizer, tp communication."""
    fig = go.Figure()
    for keys, label, color in ((("compute_s",), "GEMMs", "#4C78A8"),
                               (("memory_s", "optimizer_s"), "memory-bound kernels and optimizer", "#9ECAE9"),
                               (("comm_tp_s",), "tp communication", "#E45756")):
        fig.add_trace(go.Bar(y=[n.split(" (")[0] for n in links], x=[sum(r[k] for k in keys) * 1e3 for r in rows],
                             name=label, orientation="h", marker_color=color))
    fig.update_layout(barmode="stack", xaxis_title="ms")
    return finish(fig, title=f"{model}, tp={tp}: one step",
                  subtitle=f"{PREDICTED}, kernels only; {batch} sequences of {seq_len:,} tokens in one "
                           f"micro-batch, dp 1, {dtype}",
                  legend="below")
