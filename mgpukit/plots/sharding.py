"""Sharding figures (notebook 06): what ZeRO's stages keep per rank and what they send.

- `plot_model_states(rows)`: per strategy, params + grads + optimizer states per rank, measured
  (solid) next to the cost model's ZeRO formula (hatched) — rows from
  `mgpukit.studies.sharding.sharding_study`.
- `plot_comm_volume(rows)`: bytes sent per step, measured next to predicted.
- `plot_zero_stages(psi, dp=, dtype=)`: predicted bytes per GPU for stages 0-3, any model size.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.costmodel.hardware import load_profile
from mgpukit.studies.sharding import model_state_table

from .style import MEMORY_COLORS, PREDICTED, byte_unit, series_color

CATEGORIES = ("params", "grads", "optimizer")


def plot_model_states(rows: list[dict]) -> go.Figure:
    """Stacked bars per strategy: measured (largest rank) and predicted model-state bytes."""
    top = max(max(r["measured_total"], r["predicted_total"]) for r in rows)
    scale, unit = byte_unit(top)
    fig = go.Figure()
    for cat in CATEGORIES:
        for src, key in (("measured", "measured"), (PREDICTED, "predicted")):
            fig.add_trace(go.Bar(
                x=[[r["strategy"] for r in rows], [src.split(" ")[0]] * len(rows)],
                y=[r[key][cat] / scale for r in rows], name=f"{cat} — {src}", legendgroup=src,
                marker=dict(color=MEMORY_COLORS[cat], pattern=dict(shape="/" if key == "predicted" else ""),
                            opacity=0.6 if key == "predicted" else 1.0),
                hovertemplate=f"%{{x}}<br>{cat} %{{y:.3g}} {unit}<extra></extra>"))
    w = rows[0]["workers"]
    fig.update_layout(barmode="stack", yaxis_title=f"bytes per rank ({unit})",
                      title=dict(text=f"Model states per rank, {w} workers — measured (CPU) vs predicted",
                                 subtitle=dict(text="stacked: params, grads, optimizer states")))
    return fig


def plot_comm_volume(rows: list[dict]) -> go.Figure:
    """Bytes each rank sends per step (ring bus bytes), measured and predicted."""
    scale, unit = byte_unit(max(r["bytes_sent_per_step"] for r in rows))
    names = [r["strategy"] for r in rows]
    fig = go.Figure([
        go.Bar(x=names, y=[r["bytes_sent_per_step"] / scale for r in rows], name="measured",
               marker_color=series_color(0),
               text=[f"{r['comm_vs_ddp']:.2f}× DDP" if r["comm_vs_ddp"] else "" for r in rows]),
        go.Bar(x=names, y=[r["predicted_bytes_per_step"] / scale for r in rows], name=PREDICTED,
               marker=dict(color=series_color(0), opacity=0.5, pattern=dict(shape="/"))),
    ])
    fig.update_layout(barmode="group", yaxis_title=f"sent per rank per step ({unit})",
                      title="Communication per step — measured (CPU) vs predicted")
    return fig


def plot_zero_stages(psi: float, *, dp: int = 8, dtype: str = "bf16", optimizer: str = "adamw",
                     profile: str = "h100-nvlink", label: str = "") -> go.Figure:
    """Predicted model-state bytes per GPU for ZeRO stages 0-3, with the GPU's usable memory."""
    hw = load_profile(profile)
    table = model_state_table(psi, dp=dp, dtype=dtype, optimizer=optimizer)
    usable = hw.usable_memory_bytes
    scale, unit = 1e9, "GB"  # decimal, as the text and the planner print them
    x = [f"ZeRO-{r['zero']}" if r["zero"] else "DDP" for r in table]
    fig = go.Figure([go.Bar(x=x, y=[r[c] / scale for r in table], name=c,
                            marker=dict(color=MEMORY_COLORS[c], pattern=dict(shape="/")))
                     for c in CATEGORIES])
    fig.add_trace(go.Scatter(x=x, y=[usable / scale] * len(x), mode="lines",
                             name=f"{profile}: {usable / 1e9:.1f} GB usable ({hw.usable_memory:.0%} of "
                                  f"{hw.memory_bytes / 1e9:.1f} GB = {hw.memory_bytes / 2**30:.1f} GiB)",
                             line=dict(color="black", dash="dash")))
    fig.update_layout(barmode="stack", yaxis_title=f"bytes per GPU ({unit})",
                      title=dict(text=f"{label or f'{psi / 1e9:.3g}B parameters'} on dp={dp}, {dtype}, "
                                      f"{optimizer} — {PREDICTED}",
                                 subtitle=dict(text="model states only: activations come on top")))
    return fig
