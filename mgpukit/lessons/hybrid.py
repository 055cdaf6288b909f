"""Notebook 08's studies: the 3D mesh and which collectives run on each axis, a hybrid run
beside the cost model's figures, the same layout on H100 nodes (emulated and predicted), and
which axis should cross the node boundary.

Everything calls the library — `mgpukit.run("hybrid", ...)`, the record's ``theory`` and
``comm[rank]["by_axis"]``, `costmodel.step_time` through `strategies.hybrid.theory` — the
notebook only shows and asks.
"""
from __future__ import annotations

import dataclasses
import statistics
import warnings

import plotly.graph_objects as go

from mgpukit.costmodel.comm import link_for_ranks
from mgpukit.costmodel.hardware import HardwareProfile, load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.display import errors_shown_in, show
from mgpukit.experiment import run
from mgpukit.plots import plot_timeline
from mgpukit.plots.style import PREDICTED, time_unit
from mgpukit.prepare import prepare
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.launcher import OversubscribedWarning
from mgpukit.runtime.nodes import NodeLayout, NodeLayoutWarning
from mgpukit.strategies.hybrid.theory import predicted_step

AXES = ("tp", "dp", "pp")
AXIS_COLORS = {"tp": "#E45756", "dp": "#4C78A8", "pp": "#54A24B"}
AXIS_ROLE = {"tp": "inside every layer, every micro-batch",
             "dp": "once per step, after the schedule",
             "pp": "at the stage boundary, every micro-batch"}


def dims_of(dims) -> ParallelDims:
    """`(dp, tp, pp)` (or a ParallelDims) -> ParallelDims."""
    return dims if isinstance(dims, ParallelDims) else ParallelDims(dp=dims[0], tp=dims[1], pp=dims[2])


def axis_groups(dims, axis: str) -> list[list[int]]:
    """Every group of global ranks along `axis` (the mesh is (pp, dp, tp), tp fastest)."""
    d = dims_of(dims)
    seen, groups = set(), []
    for r in range(d.world_size):
        c = d.coords(r)
        group = [d.rank_of(**{**c, axis: i}) for i in range(getattr(d, axis))]
        if tuple(group) not in seen:
            seen.add(tuple(group))
            groups.append(group)
    return groups


# ------------------------------------------------------------------------------ 1. the mesh

def axis_collectives(theory: dict) -> dict[str, str]:
    """Per axis, what one rank issues per step (the cost model's counts, stage by stage)."""
    out = {}
    for axis in AXES:
        per_stage = [s["collectives"][axis] for s in theory["stages"]]
        if not any(per_stage):
            out[axis] = "nothing (degree 1)"
            continue
        kinds = sorted({k for s in per_stage for k in s})
        counts = ", ".join(f"{k} ×{' | '.join(str(s.get(k, 0)) for s in per_stage)}" for k in kinds)
        out[axis] = counts + (f" (stage {' | '.join(str(i) for i in range(len(per_stage)))})"
                              if len(per_stage) > 1 else "")
    return out


def theory_of(dims=(2, 2, 2), **overrides) -> dict:
    """The cost model's figures for a hybrid run at `(dp, tp, pp)` — what its record's
    ``theory`` will say — without running it (`mgpukit.experiment.prepare` checks the layout)."""
    d = dims_of(dims)
    p = prepare("hybrid", workers=d.world_size, layout=d.as_dict(), **overrides)
    return p.strategy.theory(p.cfg, p.dims)


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


# ---------------------------------------------------------------------------- 2. a real run

def run_hybrid(dims=(2, 2, 2), *, steps: int = 2, **kw) -> dict:
    """`mgpukit.run("hybrid")` at `(dp, tp, pp)`; keywords as `mgpukit.run` (mode, profile …);
    ``layout`` adds fields to the dims' (e.g. ``num_micro_batches``)."""
    d = dims_of(dims)
    layout = {**d.as_dict(), **kw.pop("layout", {})}
    with warnings.catch_warnings():  # 8 workers on 2 cores: correct, wall clock distorted
        warnings.simplefilter("ignore", OversubscribedWarning)
        return run("hybrid", workers=d.world_size, steps=steps, layout=layout, **kw)


def axis_table(record: dict) -> list[dict]:
    """Per rank: its coordinates and the bytes it sent per step on each axis, measured (the
    recorder's `by_axis`) and predicted (the record's theory for its stage)."""
    d = ParallelDims(**record["dims"])
    steps = len(record["step_time_s"])
    rows = []
    for rank in sorted(record["comm"], key=int):
        c = d.coords(int(rank))
        want = record["theory"]["stages"][c["pp"]]["bytes_sent"]
        got = record["comm"][rank].get("by_axis", {})
        rows.append({"rank": int(rank), **c,
                     **{f"{a}_measured": got.get(a, 0.0) / steps for a in AXES},
                     **{f"{a}_predicted": want[a] for a in AXES}})
    return rows


def last_step(record: dict) -> float:
    """The step time of a record without its first step (warm-up), median."""
    steps = record["step_time_s"]
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


# ----------------------------------------------------------- 3-4. H100 nodes, axes across nodes

def node_profile(gpus_per_node: int, base: str = "h100-ib") -> HardwareProfile:
    """`base` with `gpus_per_node` GPUs per node: ranks fill nodes in order, so the axes whose
    groups span more ranks than a node holds go over InfiniBand."""
    hw = load_profile(base)
    if gpus_per_node == hw.gpus_per_node:
        return hw
    return dataclasses.replace(hw, name=f"{base}-{gpus_per_node}pn", gpus_per_node=gpus_per_node,
                               description=f"{hw.description} — with {gpus_per_node} GPUs per node")


def crossing(dims, profile: HardwareProfile) -> dict[str, bool]:
    """Per axis: does its group (through rank 0) leave the node?"""
    d = dims_of(dims)
    out = {}
    for axis in AXES:
        group = axis_groups(d, axis)[0]
        out[axis] = len(group) > 1 and link_for_ranks(group, profile) != profile.intra_node
    return out


def layout_of(record: dict) -> Layout:
    return Layout(**record["layout"])


def placements(dims=(2, 2, 2), *, gpus_per_node=(8, 4, 2, 1), emulate=(4, 2, 1), model: str = "gpt-tiny",
               base: str = "h100-ib", steps: int = 2, shape: bool = False,
               kernels_only: bool | None = None, num_micro_batches: int | None = None) -> list[dict]:
    """The same layout with nodes of `gpus_per_node` GPUs: which axes cross nodes, the
    predicted step (cost model) split by cause, and — for the node sizes in `emulate` — the
    emulated step (virtual clock, 8 CPU workers; `shape=True` runs them in shape mode, the
    real program on fake tensors, for the GPT-2 sizes).

    ``kernels_only`` (default: True for the tiny model, False in shape mode) runs the clock on
    the profile's kernels alone (`HardwareProfile.kernels_only`), as `analytic_vs_emulated`
    does: the cost model counts kernels and messages, and the tiny model on a GPU is made of
    host launches, which hide every link. A layout the kit warns about (a tp group across
    nodes: `NodeLayoutWarning`) keeps its sentence in the row's ``warning``.

    ``num_micro_batches``: the pipeline's micro-batch count (default: the run's own). Fewer
    micro-batches of the same global batch are fewer, larger ops — what a shape-mode run on a
    few cores pays for, since fake tensors cost per op, not per byte."""
    d = dims_of(dims)
    extra = {} if num_micro_batches is None else {"num_micro_batches": num_micro_batches}
    kernels_only = (not shape) if kernels_only is None else kernels_only
    rows = []
    layout = None
    for gpn in gpus_per_node:
        hw = node_profile(gpn, base)
        clock = hw.kernels_only() if kernels_only else hw
        rec, warning = None, _node_warning(d, hw)
        if gpn in emulate:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NodeLayoutWarning)  # kept in the row, said once
                rec = run_hybrid(d, steps=steps, mode="emulated", profile=clock, parity=False, model=model,
                                 shape=shape, layout=extra)
        if layout is None or rec is not None:
            layout = layout_of(rec) if rec is not None else _layout_for(d, model, shape, base, **extra)
        pred = predicted_step(model, layout, clock)
        rows.append({"gpus_per_node": gpn, "nodes": -(-d.world_size // gpn),
                     "across_nodes": [a for a, x in crossing(d, hw).items() if x],
                     "predicted": pred, "predicted_s": pred["total_s"], "kernels_only": kernels_only,
                     "emulated_s": last_step(rec) if rec is not None else None, "record": rec,
                     "warning": warning})
    return rows


def _node_warning(d: ParallelDims, hw: HardwareProfile) -> str | None:
    """The kit's sentence about this placement (`runtime.nodes.NodeLayout.check`), or None."""
    return NodeLayout.uniform(d.world_size, hw.gpus_per_node).check(d)


def _layout_for(d: ParallelDims, model: str, shape: bool = False, profile: str = "h100-ib", **layout) -> Layout:
    where = dict(mode="emulated", profile=profile, shape=True) if shape else {}
    return prepare("hybrid", workers=d.world_size, layout={**d.as_dict(), **layout}, model=model, **where).cfg.layout


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


def predicted_at_scale(model: str = "1.3b", dims=(2, 2, 2), *, gpus_per_node=(8, 4, 2, 1),
                       micro_batch: int = 1, num_micro_batches: int = 8, base: str = "h100-ib",
                       kernels_only: bool = True) -> list[dict]:
    """The same placements for a real model (predicted only; emulating it at this scale is
    what shape mode is for), bf16, 1F1B.

    ``kernels_only`` (default): kernels and messages alone, the question being which link each
    axis uses. With an eager host (the kit's: every op a Python call and a launch) a micro-batch
    of one sequence is launch-bound at this size and the host hides every link; each row keeps
    that host's seconds per step in ``host_s`` (`costmodel.step_time`), so a cell can say so.
    Frameworks at this scale fuse kernels or capture CUDA graphs to lift that bound."""
    d = dims_of(dims)
    layout = Layout(dp=d.dp, tp=d.tp, pp=d.pp, micro_batch=micro_batch, num_micro_batches=num_micro_batches,
                    dtype="bf16")
    rows = []
    for gpn in gpus_per_node:
        hw = node_profile(gpn, base)
        pred = predicted_step(model, layout, hw.kernels_only() if kernels_only else hw)
        rows.append({"gpus_per_node": gpn, "nodes": -(-d.world_size // gpn),
                     "across_nodes": [a for a, x in crossing(d, hw).items() if x],
                     "predicted": pred, "predicted_s": pred["total_s"], "kernels_only": kernels_only,
                     "host_s": predicted_step(model, layout, hw)["host_s"], "emulated_s": None})
    return rows


# ---------------------------------------------------------------- 5. analytic vs emulated

# (dp, tp, pp, m) of 8 ranks: every axis alone and together (the bench's five)
LAYOUTS = ((2, 2, 2, 4), (1, 2, 4, 8), (2, 1, 4, 4), (1, 4, 2, 4), (4, 2, 1, 2))


def analytic_vs_emulated(layouts=LAYOUTS, *, profile="h100-nvlink", model: str = "gpt-tiny",
                         steps: int = 2, global_batch: int = 8, shape: bool = False) -> list[dict]:
    """Per layout: the cost model's step time and the virtual clock's (8 CPU workers running
    the real program), and their ratio.

    ``shape=True``: the program at real scale under fake tensors (`mgpukit.measure.shape`;
    e.g. ``model="gpt2-350m"``) on the full profile, host launches included — at that size
    the kernels are long enough to hide them, as on a GPU. Otherwise (the tiny model) both
    sides on the profile's kernels only (`HardwareProfile.kernels_only`): the closed form
    counts no host launches, and a tiny model's step on a GPU is made of them
    (`mgpukit.lessons.launch`)."""
    hw = load_profile(profile) if isinstance(profile, str) else profile
    if not shape:
        hw = hw.kernels_only()
    rows = []
    for dp, tp, pp, m in layouts:
        rec = run_hybrid((dp, tp, pp), steps=steps, mode="emulated", profile=hw, parity=False,
                         model=model, global_batch=global_batch, micro_batches=m, shape=shape)
        analytic = predicted_step(model, layout_of(rec), hw)["total_s"]
        emulated = last_step(rec)
        rows.append({"dp": dp, "tp": tp, "pp": pp, "m": m, "analytic_s": analytic, "emulated_s": emulated,
                     "ratio": analytic / emulated, "within_10pct": abs(analytic / emulated - 1) <= 0.10})
    return rows


# ------------------------------------------------------------------ the node boundary, by hand

def busy_by_rank(record: dict, step: int = 1) -> dict[int, dict[str, float]]:
    """Per rank, seconds of step `step` spent in each ``stream:kind`` of the timeline (a rank's
    waits included as ``compute:wait``) — where an emulated step went, to set beside the cost
    model's split."""
    out: dict[int, dict[str, float]] = {}
    for e in record["timeline"]:
        if e.get("step", step) != step:
            continue
        d = out.setdefault(e["rank"], {})
        key = f"{e['stream']}:{e['kind']}"
        d[key] = d.get(key, 0.0) + e["end"] - e["start"]
    return out


def placement_lab(dims=(2, 2, 2), *, initial: dict | None = None, base: str = "h100-ib"):
    """Widget: move the node boundary (GPUs per node), press Run — the (dp, tp, pp) hybrid of
    gpt-tiny runs on 8 CPU workers under that placement's virtual clock (kernels only, as
    `placements`), and its step, the axes that cross nodes and its timeline (messages between
    nodes hatched) show beside the cost model's prediction. `initial`: a `placements` row to
    show first."""
    # lazy: start-up (ipywidgets ~0.2 s, for this widget only; lab workers import lessons)
    import ipywidgets as w
    from IPython.display import display  # lazy: as the line above

    d = dims_of(dims)
    per_node = w.Dropdown(options=[8, 4, 2, 1], value=4, description="GPUs per node",
                          style={"description_width": "initial"})
    button = w.Button(description="Run it (emulated, 8 workers)", icon="play", button_style="primary",
                      layout=w.Layout(width="auto"))
    out = w.Output()

    def result(row):
        emu, pred = row["emulated_s"], row["predicted_s"]
        text = (f"{row['gpus_per_node']} GPU/node, {row['nodes']} node(s); axes crossing nodes: "
                f"{', '.join(row['across_nodes']) or 'none'} · step emulated (kernels only) {emu * 1e6:,.1f} µs · "
                f"{PREDICTED} {pred * 1e6:,.1f} µs (×{pred / emu:.2f}"
                + ("; the cost model adds the pipeline's messages and the bubble end to end, the clock overlaps them)"
                   if pred / emu > 1.05 else ")"))
        if row.get("warning"):
            text += f"\nthe kit warns: {row['warning']}"
        show(out, text, plot_timeline(row["record"], step=1))

    def changed(*_):
        hw = node_profile(per_node.value, base)
        across = [a for a, x in crossing(d, hw).items() if x]
        show(out, f"{per_node.value} GPU/node: {', '.join(across) or 'no axis'} would cross nodes — press Run "
                  "(about 10 s of this machine)")

    def run_it(*_):
        show(out, f"launching 8 emulated workers, {per_node.value} GPU/node…")
        with errors_shown_in(out):
            (row,) = placements(d, gpus_per_node=(per_node.value,), emulate=(per_node.value,), base=base)
            result(row)

    per_node.observe(changed, names="value")
    button.on_click(run_it)
    if initial is not None:
        per_node.value = initial["gpus_per_node"]
        result(initial)
    else:
        changed()
    box = w.VBox([w.HBox([per_node, button]), out])
    display(box)
    return box
