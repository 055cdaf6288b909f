"""Widget for notebook 11: run context or expert parallelism at the sizes you pick.

Context parallelism: sequence length × cp ranks; expert parallelism: experts × top-k ×
capacity factor on 2 ranks. The button runs the real program twice (CPU workers with parity
against one process, then the virtual clock of an H100 profile) and prints measured beside
emulated beside predicted (`lessons.long_context.three_ways`), with the MoE's dropped tokens and
load imbalance.
"""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.lessons import long_context as lc


def _table(rows) -> str:
    lines = [f"{'figure':<26}{'measured':>14}{'emulated':>14}{'predicted':>14}"]
    for r in rows:
        cells = [("-" if v is None else f"{v:,.4g}") for v in (r["measured"], r["emulated"], r["predicted"])]
        lines.append(f"{r['figure']:<26}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def long_context_lab(*, show: bool = True):
    """Two rows of controls and a button per strategy; headless (CI) nothing runs until clicked."""
    seq = w.Dropdown(options=[64, 128, 256], value=64, description="seq len")
    cp = w.Dropdown(options=[2, 4], value=2, description="cp ranks")
    experts = w.Dropdown(options=[2, 4, 8], value=8, description="experts")
    top_k = w.Dropdown(options=[1, 2], value=2, description="top-k")
    factor = w.FloatSlider(value=1.25, min=0.25, max=2.0, step=0.25, description="capacity")
    run_cp, run_ep = w.Button(description="run cp"), w.Button(description="run ep (2 ranks)")
    out = w.Output()

    def go_cp(_=None):
        out.clear_output()
        with out:
            got = lc.three_ways("cp", workers=cp.value, options={"model_sizes": {"seq_len": seq.value}})
            print(f"cp {cp.value}, {seq.value} tokens: parity {got['measured']['parity']['ok']}")
            print(_table(got["rows"]))

    def go_ep(_=None):
        out.clear_output()
        with out:
            if top_k.value > experts.value:
                print(f"top-k {top_k.value} > {experts.value} experts: pick fewer")
                return
            sizes = {"n_expert": experts.value, "top_k": top_k.value, "capacity_factor": factor.value}
            got = lc.three_ways("ep", workers=2, options={"model_sizes": sizes})
            moe = got["measured"]["extra"]["0"]["moe"]
            print(f"ep 2, {experts.value} experts, top-{top_k.value}, capacity {factor.value}: "
                  f"parity {got['measured']['parity']['ok']}; dropped {moe['dropped'] / moe['routed']:.1%} "
                  f"of assignments; busiest expert / mean: "
                  + ", ".join(f"{x:.2f}" for x in moe["imbalance"]))
            print(_table(got["rows"]))

    run_cp.on_click(go_cp)
    run_ep.on_click(go_ep)
    box = w.VBox([w.HBox([seq, cp, run_cp]), w.HBox([experts, top_k, factor, run_ep]), out])
    if show:
        display(box)
        return None
    return box
