"""Notebook 11: long sequences (context parallelism) and many experts (expert parallelism).

Studies that run the two strategies and set what they measured beside the virtual clock and
the cost model (`costmodel.cp_ep`); the mechanics live in `strategies.context_parallel` and
`strategies.expert_parallel`, the MoE model in `models.moe`.
"""
from __future__ import annotations

import mgpukit
from mgpukit.config import RunConfig
from mgpukit.costmodel.cp_ep import cp_bytes, ep_bytes, expert_capacity
from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.context_parallel.check import ring_vs_full
from mgpukit.strategies.context_parallel.ring import blocks_per_rank
from mgpukit.lessons.tables import markdown_table

__all__ = ["ring_check", "blocks_per_rank", "three_ways", "ring_bytes", "all_to_all_bytes", "capacity"]


def ring_check(cp: int = 2) -> list[dict]:
    """Ring attention on `cp` ranks against plain causal attention (forward and backward)."""
    return mgpukit.launch(ring_vs_full, cp, dims=ParallelDims(dp=cp, cp=cp), echo=False, takes_context=True)


def ring_bytes(model: str = "gpt-tiny", *, cp: int = 2, rows: int = 8) -> float:
    """Predicted ring bytes one rank sends per step (`costmodel.cp_ep.cp_bytes`)."""
    m = RunConfig(model=model).model_config()
    return cp_bytes(rows=rows, seq_len=m.seq_len, d_model=m.d_model, n_layer=m.n_layer, cp=cp)["total"]


def all_to_all_bytes(model: str = "gpt-moe", *, ep: int = 2, rows: int = 4) -> float:
    """Predicted all-to-all bytes one rank sends per step (`costmodel.cp_ep.ep_bytes`)."""
    m = RunConfig(model=model).model_config()
    return ep_bytes(rows=rows, seq_len=m.seq_len, d_model=m.d_model, n_expert=m.n_expert, top_k=m.top_k,
                    capacity_factor=m.capacity_factor, n_moe_layers=m.n_layer, ep=ep)["total"]


def capacity(model: str = "gpt-moe", *, seq_len: int | None = None) -> int:
    """Slots per expert per sequence of `model` (`costmodel.cp_ep.expert_capacity`), at its own
    sequence length or at `seq_len` tokens."""
    m = RunConfig(model=model).model_config()
    return expert_capacity(seq_len or m.seq_len, m.n_expert, m.top_k, m.capacity_factor)


def three_ways(strategy: str, *, workers: int = 2, steps: int = 2, layout: dict | None = None,
            profile: str = "h100-nvlink", **config) -> dict:
    """One layout run measured (CPU workers, parity against one process) and emulated on
    `profile`: {"measured", "emulated"} records and the rows measured | emulated | predicted."""
    measured = mgpukit.run(strategy, workers=workers, steps=steps, layout=layout, **config)
    emulated = mgpukit.run(strategy, workers=workers, steps=steps, layout=layout, mode="emulated",
                           profile=profile, **config)
    axis = "cp" if strategy == "cp" else "ep"
    key = f"{axis}_bytes_per_step"
    rows = [{"figure": f"{axis} bytes / rank / step", "measured": measured["comm"]["0"]["by_axis"][axis] / steps,
             "emulated": emulated["comm"]["0"]["by_axis"][axis] / steps, "predicted": measured["theory"][key]},
            {"figure": f"all bytes / rank / step ({axis} + the gradients' all-reduce)", "measured": measured["comm"]["0"]["bytes_sent"] / steps,
             "emulated": emulated["comm"]["0"]["bytes_sent"] / steps,
             "predicted": measured["theory"]["comm_bytes"]},
            # no measured step time: a few steps of CPU workers sharing two cores have no spread to
            # judge it by (the course's noise rule, `measure.spread`); the virtual clock's has none
            {"figure": "step time (s)", "measured": None,
             "emulated": sorted(emulated["step_time_s"])[len(emulated["step_time_s"]) // 2], "predicted": None}]
    return {"measured": measured, "emulated": emulated, "rows": rows}


def three_ways_markdown(rows: list[dict]) -> str:
    """`three_ways`' rows as a Markdown table: each figure measured, emulated and predicted
    (a dash where a column has no such figure; counts of 1,000 or more in full with thousands
    separators, not e-notation)."""
    def cell(v):
        if v is None:
            return "—"
        return format(v, ",.0f") if abs(v) >= 1000 else format(v, ",.4g")
    return markdown_table(["", "measured", "emulated", "predicted"],
                          [[r["figure"], cell(r["measured"]), cell(r["emulated"]), cell(r["predicted"])] for r in rows])
