"""Notebook 08's figures: the (pp, dp, tp) mesh and one step as the axes cross nodes."""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.plots.style import PREDICTED, time_unit
from mgpukit.studies.hybrid import AXES, axis_collectives, axis_groups, dims_of

AXIS_COLORS = {"tp": "#E45756", "dp": "#4C78A8", "pp": "#54A24B"}




def plot_mesh(dims=(2, 2, 2), theory: dict | None = None) -> go.Figure:
    """The (pp, dp, tp) mesh: one panel per pipeline stage, dp rows × tp columns, a line per
    group of each axis; with a run's `theory`, the legend says what each axis carries."""
    d = dims_of(dims)
    what = axis_collectives(theory) if theory else {}
    pos = {}
    for r in range(d.world_size):
        c = d.coords(r)
        pos[r] = (c["pp"] * (d.tp + 1.2) + c["tp"], -c["dp"])
    fig = go.Figure()
    for axis in AXES:
        if getattr(d, axis) == 1:
            continue
        xs, ys = [], []
        for group in axis_groups(d, axis):
            for a, b in zip(group, group[1:]):
                (x0, y0), (x1, y1) = pos[a], pos[b]
                if axis == "pp":  # an arc around the ranks in between: over for even tp, under for odd
                    tp_rank = d.coords(a)["tp"]
                    lift = (0.3 + 0.05 * (tp_rank // 2)) * (1 if tp_rank % 2 == 0 else -1)
                    for k in range(21):
                        t = k / 20
                        xs.append(x0 + (x1 - x0) * t)
                        ys.append(y0 + lift * 4 * t * (1 - t))
                else:
                    xs += [x0, x1]
                    ys += [y0, y1]
                xs.append(None)
                ys.append(None)
        label = f"{axis} ({getattr(d, axis)}): {what[axis]}" if axis in what else f"{axis} ({getattr(d, axis)})"
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=label,
                                 line=dict(color=AXIS_COLORS[axis], width=4, dash="dot" if axis == "pp" else None)))
    fig.add_trace(go.Scatter(
        x=[p[0] for p in pos.values()], y=[p[1] for p in pos.values()], mode="markers+text",
        marker=dict(size=46, color="white", line=dict(color="#444", width=2)),
        text=[f"<b>{r}</b><br>{d.coords(r)['pp']}·{d.coords(r)['dp']}·{d.coords(r)['tp']}" for r in pos],
        textfont=dict(size=10), showlegend=False, hoverinfo="skip"))
    for s in range(d.pp):
        fig.add_annotation(x=s * (d.tp + 1.2) + (d.tp - 1) / 2, y=0.75, text=f"stage {s}", showarrow=False)
    fig.update_layout(
        title=f"the mesh (pp, dp, tp) = ({d.pp}, {d.dp}, {d.tp}): each circle a rank and its pp·dp·tp "
              f"coordinates" + ("<br><sup>legend: what one rank of each stage issues per step (cost model)</sup>"
                                 if theory else ""),
        height=220 + 90 * d.dp, margin=dict(l=10, r=10, t=60, b=10), plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.05, yanchor="top"),
        xaxis=dict(visible=False, range=[-0.7, d.pp * (d.tp + 1.2) - 0.5]),
        yaxis=dict(visible=False, range=[-d.dp + 0.3, 0.95]))
    return fig


def plot_placements(rows: list[dict], *, title: str = "") -> go.Figure:
    """Predicted step split by cause (stacked), emulated steps as diamonds, per node size."""
    names = [f"{r['gpus_per_node']} GPU/node<br>across: {', '.join(r['across_nodes']) or 'none'}" for r in rows]
    parts = (("compute_s", "compute", "#4C78A8"), ("memory_s", "memory-bound kernels", "#9ECAE9"),
             ("comm_tp_s", "tp comm", AXIS_COLORS["tp"]),
             ("comm_pp_s", "pp comm", AXIS_COLORS["pp"]), ("comm_dp_s", "dp comm", "#72B7B2"),
             ("bubble_s", "bubble", "#D9D9D9"), ("optimizer_s", "optimizer", "#EECA3B"))
    mult, unit = time_unit(max(max(r["predicted_s"], r["emulated_s"] or 0.0) for r in rows))
    fig = go.Figure()
    for key, label, color in parts:
        fig.add_trace(go.Bar(x=names, y=[r["predicted"][key] * mult for r in rows], name=f"{label}, {PREDICTED}",
                             marker_color=color))
    emu = [r for r, n in zip(rows, names) if r["emulated_s"] is not None]
    if emu:
        fig.add_trace(go.Scatter(x=[n for r, n in zip(rows, names) if r["emulated_s"] is not None],
                                 y=[r["emulated_s"] * mult for r in emu], mode="markers", name="step, emulated (virtual clock)",
                                 marker=dict(symbol="diamond", size=14, color="black")))
    fig.update_layout(barmode="stack", title=title or "one step as the axes cross nodes", yaxis_title=unit,
                      height=440, legend=dict(orientation="h", y=-0.3), margin=dict(b=150))
    return fig


