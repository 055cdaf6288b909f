"""Notebook 05's studies: a matmul split by hand, where tensor parallelism's bytes go, what
sequence parallelism saves, and why a tp group stays inside a node.

Everything here calls the library (`mgpukit.strategies.tensor_parallel`, the cost model's
`tensor_parallel` table, `mgpukit.run`); the notebook only shows and asks.
"""
from __future__ import annotations

import warnings

import torch

from mgpukit.config import RunConfig
from mgpukit.costmodel.comm import bus_factor
from mgpukit.costmodel.layout import DTYPE_BYTES, Layout
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.tensor_parallel import tp_collectives
from mgpukit.experiment import run
from mgpukit.measure.memory import ActivationMeter
from mgpukit.measure.recorder import Recorder
from mgpukit.models import GPT, gpt_small, gpt_tiny
from mgpukit.plots.tensor_parallel import plot_block, plot_tp_scaling  # noqa: F401  (notebook 05: `tpl.plot_…`)
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.launcher import OversubscribedWarning, launch
from mgpukit.strategies.tensor_parallel.apply import apply_tp
from mgpukit.studies.tp_links import (LINKS, PCIE, link_profile, link_table,  # noqa: F401  (notebook 05)
                                      predicted_tp_step, shape_of, steady_step, tp_link)


# ---------------------------------------------------------------------------- 1. by hand

# --------------------------------------------------------------------- 2. the block diagram


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

def layernorm_saved_bytes(ctx, sp: bool, *, batch: int = 4) -> dict:
    """Inside `launch(..., takes_context=True)`: bytes the LayerNorms of this rank's split GPT save for backward
    (`bytes`), and the shape of this rank's logits (`logits_shape`: the vocabulary is split)."""
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
        ranks = launch(layernorm_saved_bytes, t, sp, dims=ParallelDims(tp=t), echo=False, takes_context=True)
        out["tp-sp" if sp else "tp"] = ranks[0]["bytes"]
    return out


# --------------------------------------------------------------- 5. why tp stays in a node


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


def emulated_steps(tps=(2, 4), links=("NVLink (h100-nvlink)", PCIE), steps: int = 2,
                   kernels_only: bool = True) -> list[dict]:
    """`tp` on gpt-tiny under the virtual clock of each link, for each tp degree (`emulated_run`)."""
    return [emulated_run(t, link, steps=steps, kernels_only=kernels_only) for link in links for t in tps]


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


# --------------------------------------------------------------------------------- exercises

def expected(name: str):
    """The answers the notebook's exercises are checked against (kept out of the cells)."""
    small, tiny = gpt_small(), gpt_tiny()
    shape = ModelShape.from_gpt_config(tiny)

    if name == "tp-shard-shapes":  # gpt-small, t = 4: q_proj's and fc2's weight on one rank
        return [[small.d_model // 4, small.d_model], [small.d_model, small.d_ff // 4]]
    if name == "tp-all-reduces":  # tp on gpt-tiny, one step: the blocks' all-reduces (f and g, fwd + bwd)
        return 4 * tiny.n_layer
    if name == "tp-sp-same-bytes":  # tp-sp's bytes per step / tp's, blocks only
        return 1.0
    raise KeyError(name)


# ------------------------------------------------------------------- the rule: when TP pays over a link

def tp_threshold(link: str, dtype: str = "bf16") -> float:
    """The hidden size above which tensor parallelism shortens a layer's step over ``link``.

    Per layer and step, Megatron's TP issues 4 all-reduces (g after attention and MLP in forward,
    f before them in backward) of an s·b·h activation of B bytes; at t ranks each moves
    2(t−1)/t·sbhB over a bus bandwidth β. It saves (1 − 1/t) of the layer's GEMMs, 3 × 24·sbh²
    FLOPs (forward + backward) at a rate F. Pays when 8(t−1)/t·sbhB/β < (1 − 1/t)·72·sbh²/F:

        h > B·F / (9β)      (t cancels; latency α and attention's s² FLOPs left out)

    F here: the profile's bf16/fp32 peak × its sustained GEMM ceiling (`[gemm] sustained`)."""
    hw, beta = link_profile(link), tp_link(link).beta
    return DTYPE_BYTES[dtype] * hw.flops(dtype) * hw.gemm.sustained / (9 * beta)


def tp_rule_rows(models=("1.3b", "7b", "13b", "70b"), dtype: str = "bf16") -> list[dict]:
    """Each model × link: h, the threshold, and the cost model's tp=2 / tp=1 step (kernels only):
    the rule says "pays" when h > threshold; the step ratio says whether it does."""
    rows = []
    for m in models:
        h = shape_of(m).d_model
        for link in LINKS:
            one, two = (predicted_tp_step(m, t, link, dtype=dtype)["total_s"] for t in (1, 2))
            rows.append({"model": m, "h": h, "link": link, "threshold": tp_threshold(link, dtype),
                         "rule_pays": h > tp_threshold(link, dtype), "ratio": two / one})
    return rows
