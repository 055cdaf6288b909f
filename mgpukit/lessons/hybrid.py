"""Notebook 08's studies: the 3D mesh and which collectives run on each axis, a hybrid run
beside the cost model's figures, the same layout on H100 nodes (emulated and predicted), and
which axis should cross the node boundary.

Everything calls the library — `mgpukit.run("hybrid", ...)`, the record's ``theory`` and
``comm[rank]["by_axis"]``, `costmodel.step_time` through `strategies.hybrid.theory` — the
notebook only shows and asks.
"""
from __future__ import annotations

import dataclasses
import warnings

from mgpukit.costmodel.comm import link_for_ranks
from mgpukit.costmodel.hardware import HardwareProfile, load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.lessons.tables import markdown_table
from mgpukit.prepare import prepare
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.nodes import NodeLayout, NodeLayoutWarning
from mgpukit.plots.hybrid import AXIS_COLORS, plot_mesh, plot_placements  # noqa: F401  (notebook 08: `lab.plot_…`)
from mgpukit.strategies.hybrid.theory import predicted_step
from mgpukit.studies.hybrid import (AXES, LAYOUTS, analytic_vs_emulated, axis_collectives,  # noqa: F401  (08)
                                    axis_groups, dims_of, last_step, layout_of, run_hybrid)

AXIS_ROLE = {"tp": "inside every layer, every micro-batch",
             "dp": "once per step, after the schedule",
             "pp": "at the stage boundary, every micro-batch"}


# ------------------------------------------------------------------------------ 1. the mesh


def theory_of(dims=(2, 2, 2), **overrides) -> dict:
    """The cost model's figures for a hybrid run at `(dp, tp, pp)` — what its record's
    ``theory`` will say — without running it (`mgpukit.experiment.prepare` checks the layout)."""
    d = dims_of(dims)
    p = prepare("hybrid", workers=d.world_size, layout=d.as_dict(), **overrides)
    return p.strategy.theory(p.cfg, p.dims)


# ---------------------------------------------------------------------------- 2. a real run


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


def node_placements(dims=(2, 2, 2), *, gpus_per_node=(8, 4, 2, 1), emulate=(4, 2, 1), model: str = "gpt-tiny",
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




def placements_markdown(rows: list[dict], *, unit: str = "µs", comm: bool = False) -> str:
    """`node_placements` / `predicted_at_scale` rows as a Markdown table: GPUs per node, the axes
    that cross nodes, the predicted step (and its multiple of the first row's), the emulated step
    where one ran ("—" elsewhere); ``comm`` adds the predicted tp, pp and dp communication."""
    scale = {"µs": 1e6, "ms": 1e3}[unit]
    base = rows[0]["predicted_s"]
    header = ["GPU/node", "across nodes", f"predicted {unit}", "× first row", f"emulated {unit}", "predicted / emulated"]
    header += [f"tp comm {unit}", f"pp comm {unit}", f"dp comm {unit}"] if comm else []
    body = []
    for r in rows:
        emu = r.get("emulated_s")
        cells = [r["gpus_per_node"], ", ".join(r["across_nodes"]) or "none", f"{r['predicted_s'] * scale:.2f}",
                 f"{r['predicted_s'] / base:.2f}×", f"{emu * scale:.2f}" if emu else "—",
                 f"{r['predicted_s'] / emu:.2f}" if emu else "—"]
        if comm:
            cells += [f"{r['predicted'][k] * scale:.2f}" for k in ("comm_tp_s", "comm_pp_s", "comm_dp_s")]
        body.append(cells)
    return markdown_table(header, body)
