"""Notebook 05's studies: a matmul split by hand, where tensor parallelism's bytes go, what
sequence parallelism saves, and why a tp group stays inside a node.

Everything here calls the library (`mgpukit.strategies.tensor_parallel`, the cost model's
`tensor_parallel` table, `mgpukit.run`); the notebook only shows and asks.
"""
from __future__ import annotations

import dataclasses
import statistics
import warnings

import plotly.graph_objects as go
import torch

from mgpukit.config import RunConfig
from mgpukit.costmodel import get_shape, list_shapes, load_profile, step_time
from mgpukit.costmodel.comm import bus_factor, link_for_ranks
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.tensor_parallel import tp_collectives
from mgpukit.display import errors_shown_in, show
from mgpukit.experiment import run
from mgpukit.measure.memory import ActivationMeter
from mgpukit.measure.recorder import Recorder
from mgpukit.models import GPT, gpt_small, gpt_tiny
from mgpukit.plots import plot_timeline
from mgpukit.plots.layout import finish
from mgpukit.plots.style import PREDICTED, series_color
from mgpukit.runtime.context import current
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.launcher import OversubscribedWarning, launch
from mgpukit.strategies.tensor_parallel.apply import apply_tp


# ---------------------------------------------------------------------------- 1. by hand

def split_matmul(t: int = 2, *, rows: int = 4, d_in: int = 8, d_out: int = 6, seed: int = 0) -> dict:
    """Y = X A computed whole, by column blocks of A (concatenated) and by row blocks (summed)."""
    g = torch.Generator().manual_seed(seed)
    X, A = torch.randn(rows, d_in, generator=g), torch.randn(d_in, d_out, generator=g)
    Y = X @ A
    cols = [X @ a for a in A.chunk(t, dim=1)]  # rank i: X A_i, (rows, d_out/t)
    by_cols = torch.cat(cols, dim=1)
    parts = [x @ a for x, a in zip(X.chunk(t, dim=1), A.chunk(t, dim=0))]  # rank i: X_i A_i, (rows, d_out)
    by_rows = sum(parts)
    return {"X": tuple(X.shape), "A": tuple(A.shape), "Y": tuple(Y.shape),
            "column_shard": tuple(A.chunk(t, dim=1)[0].shape), "column_out": tuple(cols[0].shape),
            "row_shard": tuple(A.chunk(t, dim=0)[0].shape), "row_in": tuple(X.chunk(t, dim=1)[0].shape),
            "row_out": tuple(parts[0].shape),
            "max_err_columns": float((by_cols - Y).abs().max()), "max_err_rows": float((by_rows - Y).abs().max())}


# --------------------------------------------------------------------- 2. the block diagram

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


# ------------------------------------------------------------------- 3. bytes, measured vs table

def bytes_table(record: dict) -> list[dict]:
    """Per collective kind: count and bytes sent per rank, measured (rank 0) vs the cost model's
    table (`mgpukit.costmodel.tensor_parallel`) for the run's own layout and steps."""
    cfg = RunConfig(**{k: v for k, v in record["config"].items() if k != "layout"})
    layout = Layout(**record["layout"])
    shape = ModelShape.from_gpt_config(cfg.model_config())
    steps = len(record["losses"])
    comm = record["comm"]["0"]
    rows = []
    for kind, items in tp_collectives(shape, layout).items():
        rows.append({"kind": kind, "count_measured": comm["collectives"].get(kind, 0),
                     "count_table": steps * sum(c for c, _ in items),
                     "bytes_table": steps * sum(c * n * bus_factor(kind, layout.tp) for c, n in items)})
    rows.append({"kind": "total", "count_measured": sum(comm["collectives"].values()),
                 "count_table": sum(r["count_table"] for r in rows),
                 "bytes_measured": comm["bytes_sent"], "bytes_table": sum(r["bytes_table"] for r in rows)})
    return rows


# ------------------------------------------------------------ 4. sequence parallelism's memory

def layernorm_saved_bytes(sp: bool, *, batch: int = 4) -> dict:
    """Inside a launch: bytes the LayerNorms of this rank's split GPT save for backward
    (`bytes`), and the shape of this rank's logits (`logits_shape`: the vocabulary is split)."""
    ctx = current()
    model = GPT(gpt_tiny())
    apply_tp(model, ctx, Recorder(ctx), sp=sp)
    meter = ActivationMeter(model.parameters())
    active = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.LayerNorm):
            def enter(mod, args, name=name):
                active[name] = meter.track()
                active[name].__enter__()

            def leave(mod, args, out, name=name):
                active.pop(name).__exit__(None, None, None)
            m.register_forward_pre_hook(enter)
            m.register_forward_hook(leave, prepend=True)  # before the hook that gathers
    logits = model(torch.randint(0, model.cfg.vocab_size, (batch, model.cfg.seq_len)))
    return {"bytes": meter.peak, "logits_shape": tuple(logits.shape)}


def sequence_parallel_memory(t: int = 2) -> dict:
    """Measured LayerNorm activations per rank, tp vs tp + SP, on `t` CPU workers."""
    out = {}
    for sp in (False, True):
        ranks = launch(layernorm_saved_bytes, t, sp, dims=ParallelDims(tp=t), echo=False)
        out["tp-sp" if sp else "tp"] = ranks[0]["bytes"]
    return out


# --------------------------------------------------------------- 5. why tp stays in a node

PCIE = "PCIe (h100-pcie's link, the same SXM GPU)"
LINKS = {"NVLink (h100-nvlink)": ("h100-nvlink", None, None), PCIE: ("h100-nvlink", None, "h100-pcie"),
         "InfiniBand across nodes (h100-ib, 1 GPU/node)": ("h100-ib", 1, None)}


def link_profile(link: str):
    """The hardware profile behind a LINKS key. Only the link changes between them, never the
    GPU: the PCIe entry is the SXM H100 of ``h100-nvlink`` with the ``h100-pcie`` profile's
    intra-node link (that profile is the H100 PCIe *card*, 24 % less bf16 peak and 40 % less HBM
    bandwidth, which would put a GPU gap into a link comparison — even at tp = 1); the
    InfiniBand entry is ``h100-ib`` with one GPU per node (every tp group crosses the network)."""
    name, per_node, link_of = LINKS[link]
    hw = load_profile(name)
    if link_of:
        hw = dataclasses.replace(hw, intra_node=load_profile(link_of).intra_node, name=f"{name} with {link_of}'s link")
    if per_node:
        hw = dataclasses.replace(hw, gpus_per_node=per_node, name=f"{name}, {per_node} GPU/node")
    return hw


def tp_link(link: str):
    """The link a tp group of 2+ ranks runs on under `link` (`costmodel.comm.link_for_ranks`)."""
    return link_for_ranks((0, 1), link_profile(link))


def link_table() -> list[dict]:
    """Per LINKS key: the alpha (latency per message) and beta (bytes/s) a tp group gets, as the
    profiles in `data/hardware/` give them — the numbers the figures below are made of."""
    return [{"link": k, "alpha_s": tp_link(k).alpha, "beta": tp_link(k).beta} for k in LINKS]


def predicted_step(model: str, tp: int, link: str, *, global_batch: int = 8, sp: bool = False,
                   kernels_only: bool = True, dtype: str = "fp32") -> dict:
    """The analytic step time (`costmodel.step_time`) of `tp` ranks over `link` (a LINKS key).
    ``kernels_only`` (default, as `emulated_run`'s): kernels and messages alone; False: the
    host's launches too (``launch_bound`` in the result says how much of the step they set)."""
    hw = link_profile(link)
    hw = hw.kernels_only() if kernels_only else hw
    return step_time(_shape(model), Layout(tp=tp, sp=sp, micro_batch=global_batch, dtype=dtype), hw)


def explorer_dtype(model: str) -> str:
    """The precision `tp_explorer` plans ``model`` in: fp32 for the kit's own runnable models
    (gpt-tiny, gpt2-124m: what its CPU runs use), bf16 for a shipped model shape (how 1.3B-70B
    models train; in fp32 their GEMMs run on the CUDA cores, ~15× slower, and tp's messages
    would look nearly free beside them)."""
    try:
        RunConfig(model=model)
        return "fp32"
    except ValueError:
        return "bf16"


def _shape(model: str) -> ModelShape:
    """A kit model's shape (gpt-tiny, gpt2-124m) or a shipped one (`data/models/`)."""
    try:
        return ModelShape.from_gpt_config(RunConfig(model=model).model_config())
    except ValueError:
        return get_shape(model)


def emulated_run(tp: int, link: str, *, steps: int = 2, kernels_only: bool = True, model: str = "gpt-tiny") -> dict:
    """One emulated run of `tp` (or `single` at tp = 1) on `model` under the virtual clock of
    `link`'s profile. ``kernels_only`` (default) drops the host's kernel launches from the clock
    (`HardwareProfile.kernels_only`): the cost model counts kernels and messages, not launches,
    and gpt-tiny on a GPU is launch-bound (notebook 00), which would hide the link altogether."""
    hw = link_profile(link)
    hw = hw.kernels_only() if kernels_only else hw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        rec = run("tp" if tp > 1 else "single", workers=tp, mode="emulated", profile=hw, steps=steps,
                  parity=False, model=model)
    rec["link"] = link
    rec["kernels_only"] = kernels_only
    return rec


def steady_step(record: dict) -> float:
    """A record's step time without its first (warm-up) step, median."""
    return statistics.median(record["step_time_s"][1:] or record["step_time_s"])


def rank_busy(record: dict, rank: int = 0) -> dict:
    """Seconds rank `rank` spent in the last step on the clock: its kernels (the compute
    stream's forward, backward, optimizer and data ops, waits excluded) and its all-reduces —
    the two terms to set beside the cost model's ``compute_s`` and ``comm_tp_s``."""
    step = len(record["step_time_s"]) - 1
    kernels = all_reduce = 0.0
    for e in record["timeline"]:
        if e["rank"] != rank or e.get("step") != step:
            continue
        if e["stream"] == "compute" and e["kind"] != "wait":
            kernels += e["end"] - e["start"]
        elif e["stream"] == "comm" and e["kind"] == "all_reduce":
            all_reduce += e["end"] - e["start"]
    return {"kernels_s": kernels, "all_reduce_s": all_reduce}


def emulated_steps(tps=(2, 4), links=("NVLink (h100-nvlink)", PCIE), steps: int = 2,
                   kernels_only: bool = True) -> list[dict]:
    """`tp` on gpt-tiny under the virtual clock of each link, for each tp degree (`emulated_run`)."""
    return [emulated_run(t, link, steps=steps, kernels_only=kernels_only) for link in links for t in tps]


def plot_tp_scaling(model: str = "gpt-tiny", tps=(1, 2, 4), emulated: list[dict] = ()) -> go.Figure:
    """Step time vs tp degree: the cost model per link (lines), emulated runs (markers, one
    symbol per link, so markers that coincide still show)."""
    fig = go.Figure()
    symbols = ("diamond", "square", "circle")
    for i, link in enumerate(LINKS):
        fig.add_trace(go.Scatter(x=list(tps), y=[predicted_step(model, t, link)["total_s"] * 1e6 for t in tps],
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


def measured_pairs(*, pairs: int = 2, steps: int = 4, tp: int = 2) -> list[dict]:
    """`single` on 1 CPU worker and `tp` on `tp` workers, one thread each, measured, interleaved
    `pairs` times: each run's median step after warm-up and its spread (min-max), and each
    pair's ratio. On a shared machine the pairs disagree; that disagreement is the honest error
    bar. (One thread per worker: a lone worker given both cores spin-waits in OpenMP whenever
    another process holds one, and its steps swell many-fold.)"""
    out = []
    for _ in range(pairs):
        row = {}
        for name, workers in (("single", 1), ("tp", tp)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OversubscribedWarning)
                rec = run(name, workers=workers, steps=steps, mode="cpu", parity=False, threads_per_worker=1)
            st = rec["step_time_s"][1:] or rec["step_time_s"]
            row[name] = {"median_s": steady_step(rec), "min_s": min(st), "max_s": max(st),
                         "step_time": rec.get("step_time"), "flags": rec.get("flags", [])}
        row["ratio"] = row["tp"]["median_s"] / row["single"]["median_s"]
        out.append(row)
    return out


EXPLORER_BATCH = 8  # sequences per step in `tp_explorer`: one micro-batch, as the runs of notebook 05


def tp_explorer(model: str = "1.3b"):
    """Widget: a model, a tp degree — the predicted step split into compute and tensor-parallel
    communication over each link (the cost model), redrawn at once."""
    # lazy: start-up (ipywidgets ~0.2 s, for this widget only; lab workers import lessons)
    import ipywidgets as w
    from IPython.display import display  # lazy: as the line above

    models = w.Dropdown(options=list_shapes(), value=model, description="model")
    degree = w.SelectionSlider(options=[1, 2, 4, 8, 16, 32], value=8, description="tp")
    out = w.Output()

    def draw(_=None):
        with errors_shown_in(out):
            names = list(LINKS)
            dtype = explorer_dtype(models.value)
            rows = [predicted_step(models.value, degree.value, link, global_batch=EXPLORER_BATCH, dtype=dtype)
                    for link in names]
            fig = go.Figure()
            for keys, label, color in ((("compute_s",), "GEMMs", "#4C78A8"),
                                       (("memory_s", "optimizer_s"), "memory-bound kernels and optimizer", "#9ECAE9"),
                                       (("comm_tp_s",), "tp communication", "#E45756")):
                fig.add_trace(go.Bar(y=[n.split(" (")[0] for n in names], x=[sum(r[k] for k in keys) * 1e3 for r in rows],
                                     name=label, orientation="h", marker_color=color))
            fig.update_layout(barmode="stack", xaxis_title="ms")
            seq = _shape(models.value).seq_len
            finish(fig, title=f"{models.value}, tp={degree.value}: one step",
                   subtitle=f"{PREDICTED}, kernels only; {EXPLORER_BATCH} sequences of {seq:,} tokens in one "
                            f"micro-batch, dp 1, {dtype}",
                   legend="below")
            share = ", ".join(f"{n.split(' (')[0]} {r['comm_tp_s'] / r['total_s']:.0%}" for n, r in zip(names, rows))
            show(out, f"share of the step spent in tp communication ({PREDICTED}): {share}", fig)

    for c in (models, degree):
        c.observe(draw, names="value")
    draw()
    box = w.VBox([w.HBox([models, degree]), out])
    display(box)
    return box


def tp_run_lab(initial: dict | None = None):
    """Widget: pick a tp degree and a link, press Run — gpt-tiny runs `tp` for real under that
    link's virtual clock (emulated, 2 steps; `emulated_run`), and its step and timeline show
    beside the cost model's prediction on the same convention (kernels only, or both with the
    host's launches). `initial`: a record from `emulated_run` to show first."""
    # lazy: start-up (ipywidgets ~0.2 s, for this widget only; lab workers import lessons)
    import ipywidgets as w
    from IPython.display import display  # lazy: as the line above

    degree = w.Dropdown(options=[1, 2, 4], value=2, description="tp")
    link = w.Dropdown(options=list(LINKS), value=list(LINKS)[0], description="link",
                      layout=w.Layout(width="420px"), style={"description_width": "initial"})
    launches = w.Checkbox(value=False, description="charge host launches (as a GPU runs it)", indent=False)
    button = w.Button(description="Run it (emulated)", icon="play", button_style="primary",
                      layout=w.Layout(width="auto"))
    out = w.Output()

    def result(rec):
        t, name = rec["layout"]["tp"], rec["link"]
        emu = steady_step(rec)
        pred = predicted_step("gpt-tiny", t, name, kernels_only=rec["kernels_only"])["total_s"]  # one convention
        clock = "kernels only" if rec["kernels_only"] else "with host launches"
        show(out, f"gpt-tiny, tp={t}, {name}, {clock} on both sides: step emulated {emu * 1e6:,.1f} µs · "
                  f"{PREDICTED} {pred * 1e6:,.1f} µs (predicted / emulated {pred / emu:.2f})",
             plot_timeline(rec, step=1))

    def changed(*_):
        show(out, f"press Run: tp={degree.value} over {link.value}, "
                  f"{'with host launches' if launches.value else 'kernels only'} — about 5 s of this machine")

    def run_it(*_):
        show(out, f"launching {degree.value} emulated worker(s)…")
        with errors_shown_in(out):
            result(emulated_run(degree.value, link.value, kernels_only=not launches.value))

    for c in (degree, link, launches):
        c.observe(changed, names="value")
    button.on_click(run_it)
    if initial is not None:
        degree.value, link.value, launches.value = initial["layout"]["tp"], initial["link"], not initial["kernels_only"]
        result(initial)
    else:
        changed()
    box = w.VBox([w.HBox([degree, link]), w.HBox([launches, button]), out])
    display(box)
    return box


# --------------------------------------------------------------------------------- exercises

def expected(name: str):
    """The answers the notebook's exercises are checked against (kept out of the cells)."""
    small, tiny = gpt_small(), gpt_tiny()
    shape = ModelShape.from_gpt_config(tiny)

    if name == "tp-shard-shapes":  # gpt-small, t = 4: q_proj's and fc2's weight on one rank
        return [[small.d_model // 4, small.d_model], [small.d_model, small.d_ff // 4]]
    if name == "tp-all-reduces":  # tp on gpt-tiny, one micro-batch: all-reduces per step
        return sum(c for c, _ in tp_collectives(shape, Layout(tp=2, micro_batch=8, dtype="fp32"))["all_reduce"])
    if name == "tp-sp-same-bytes":  # tp-sp's bytes per step / tp's, blocks only
        return 1.0
    raise KeyError(name)
