"""Notebook 09's tables and figures: the planner's answers as a learner reads them.

Every figure here is *predicted* (the closed-form cost model), drawn with the planner's error
band: a prediction interval from its errors on published runs whose layouts are known, for the
framework and GPU generation at hand (`mgpukit.costmodel.error_bars.error_bar`). Two rules of the
planner turn a ranking into something a learner can act on, shown here, computed there:

- **Ties** (`costmodel.planner.ties_with_best`): layout *i* ties with the best when its predicted
  step sits inside the best one's range, ``T_i ≤ T_1 · (1 + high)``.
- **Near the memory limit** (`Plan.memory_verdict`): it fits as predicted, but not at the top of
  the memory bar (the planner's memory errors on the reference GPUs' measured peaks).

- `ranked_rows(rows)` / `ranked_markdown`   `planning.ranked`'s layouts with both
- `cluster_markdown(sizes)`       days, GPU-hours and cost by cluster size
- `error_rows()`                  the planner's error on every published run
- tables of the rules of thumb, Llama 3's memory, the H100 reference kernels, the MFU gap

The figures of these rows are in `mgpukit.plots.planning`.
"""
from __future__ import annotations

from mgpukit.costmodel.planner import ties_with_best
from mgpukit.costmodel.validation import validation_table
from mgpukit.costmodel.training_cost import format_money
from mgpukit.lessons import mfu_gap as mg
from mgpukit.lessons.tables import markdown_table
from mgpukit.lessons.published_checks import published_rows


def short_layout(layout) -> str:
    """``dp 4 × tp 2 × pp 8, ZeRO-1, SP, zb-h1, mb 1``: the degrees and choices, not the batch sum."""
    head = layout.describe().split(", micro-batch")[0]
    ckpt = "" if layout.checkpointing == "none" else f", ckpt {layout.checkpointing}"
    return f"{head}, mb {layout.micro_batch}{ckpt}"


def ranked_rows(rows: list[dict]) -> list[dict]:
    """`planning.ranked`'s rows with ``tie`` (:func:`ties_with_best`, the best itself excluded) and
    ``near_limit`` (``Plan.memory_verdict``)."""
    ties = ties_with_best([r["plan"] for r in rows])
    return [{"rank": i, "layout": short_layout(r["plan"].layout), "memory_gb": r["memory_gb"],
             "step_s": r["step_time_s"], "step_range": r["ranges"]["step_time_s"], "mfu": r["mfu"],
             "days": r.get("days"), "cost": r.get("cost"), "tie": i > 1 and tie,
             "near_limit": r["plan"].memory_verdict == "near the limit"}
            for i, (r, tie) in enumerate(zip(rows, ties), 1)]


def ranked_markdown(ranked: list[dict]) -> str:
    """:func:`ranked_rows` as a table: rank (or "tie"), layout, memory (flagged), step, MFU, days, cost."""
    body = [["1" if r["rank"] == 1 else ("tie" if r["tie"] else str(r["rank"])), r["layout"],
             f"{r['memory_gb']:.1f}" + (" ⚠ near limit" if r["near_limit"] else ""),
             f"{r['step_s']:.2f} ({r['step_range'][0]:.1f}–{r['step_range'][1]:.1f})", f"{r['mfu']:.1%}",
             f"{r['days']:.0f}" if r["days"] else "—", format_money(r["cost"]) if r["cost"] else "—"]
            for r in ranked]
    return markdown_table(["#", "layout", "GB / GPU", "step s (band)", "MFU", "days", "cost"], body)


def error_rows() -> list[dict]:
    """Every published run the planner is held against with a time model: name, framework, GPU,
    error (planner / published − 1, as optimism: positive = predicted faster), and whether the
    paper gives the layout (only those rows check the time model)."""
    rows = [{"name": r["run"].name, "framework": r["run"].framework, "gpu": r["run"].profile.split("-")[0],
             "error": r["error"], "layout_published": True, "note": r["run"].source} for r in validation_table()]
    for r in published_rows():
        if r["planner"] is None or r["quantity"] in ("parameters", "model states per GPU", "MFU"):
            continue  # exact arithmetic, or Llama 3's MFU rows (already in the validation table)
        optimism = -r["error"] if r["quantity"] == "GPU-hours" else r["error"]
        rows.append({"name": r["name"], "framework": "layout guessed", "gpu": "a100", "error": optimism,
                     "layout_published": False, "note": r["note"][:120]})
    return rows


def cluster_markdown(sizes: list[dict]) -> str:
    """`planning.cluster_sizes` as a table: GPUs, days, GPU-hours with their band, cost, MFU, layout."""
    body = [[f"{s['gpus']:,}", f"{s['days']:.1f}", f"{s['gpu_hours']:,.0f} ({s['ranges']['gpu_hours'][0]:,.0f}–"
             f"{s['ranges']['gpu_hours'][1]:,.0f})", format_money(s["cost"]), f"{s['mfu']:.1%}",
             short_layout(s["plan"].layout)] for s in sizes if s["plan"] is not None]
    return markdown_table(["GPUs", "days", "GPU-hours (band)", "cost", "MFU", "fastest fitting layout"], body)


def rules_markdown(rules: list[dict]) -> str:
    """`planning.rules_of_thumb` as a table: one row per claim and token budget, then the verdict."""
    body = []
    for r in rules:
        for i, (name, b) in enumerate(r.get("budgets", {}).items()):
            lo, hi = b["planner_gpu_hours_range"]
            body.append([("", r["claim"])[i == 0], f"{name} (MFU {r['mfu']:.1%})", f"{b['gpu_hours']:,.0f}",
                         f"{b['planner_gpu_hours']:,.0f} ({lo:,.0f}–{hi:,.0f})", ""])
        if "budgets" not in r:
            body.append([r["claim"], "—", "—", "—", ""])
        body[-1][-1] = r["verdict"]
    return markdown_table(["claim", "token budget", "6·N·D GPU-hours", "planner GPU-hours (band)", "verdict"], body)


def llama3_markdown(rows: list[dict]) -> str:
    """`published_checks.llama3_memory_rows` as a table: each published fact applied in turn."""
    body = [[r["step"], f"{r['gpus']:,}", f"{r['gb']:.1f}", f"{r['usable_gb']:.1f}", "fits" if r["fits"] else "no",
             f"{r['mfu']:.1%}", r["statement"]] for r in rows]
    return markdown_table(["applied", "GPUs", "GB / GPU", "usable GB", "fits?", "MFU", "the paper / the assumption"],
                          body)


def h100_layers_markdown(layers: dict) -> str:
    """`measured.llama_tp8_layer` for each model: the reference file's kernel times beside the planner's."""
    body = []
    for m, L in layers.items():
        gm, gb, gs = L["gemm_measured_s"], L["gemm_predicted_s"], L["gemm_sustained_s"]
        am, ap = L["attention_measured_s"], L["attention_predicted_s"]
        body.append([m, f"{gm * 1e3:.2f}", f"{gb * 1e3:.2f} ({gb / gm:.2f}×)", f"{gs * 1e3:.2f} ({gs / gm:.2f}×)",
                     f"{am * 1e3:.2f}", f"{ap * 1e3:.2f} ({ap / am:.2f}×)"])
    return markdown_table(["layer", "12 GEMMs measured, ms", "short-burst rate, ms", "planner's charge (ceiling), ms",
                           "attention measured, ms", "attention planner, ms"], body)


def measured_estimate(layer: dict, pl, row: dict) -> dict:
    """The MFU of ``pl`` (Llama 3's published layout) with one measured layer's GEMM + attention
    time in place of the planner's charge: an estimate, not a re-plan. ``row``: its published row."""
    t = pl.time
    ratio = ((layer["gemm_measured_s"] + layer["attention_measured_s"])
             / (layer["gemm_sustained_s"] + layer["attention_predicted_s"]))
    extra = t["compute_s"] * (ratio - 1)
    mfu = row["planner"] * t["total_s"] / (t["total_s"] + extra)
    return {"ratio": ratio, "extra_s": extra, "mfu": row["planner"], "mfu_estimate": mfu,
            "published": row["published"], "error": row["error"], "error_estimate": mfu / row["published"] - 1}


def gap_markdown(gap: dict) -> str:
    """`mfu_gap.mfu_gap`'s columns: each term's share of the planned step, then the MFUs."""
    cols = gap["columns"]
    body = [[term] + [f"{c['shares'][term]:.1%}" for c in cols.values()]
            for term, _ in mg.TERMS if any(c["shares"][term] >= 0.0005 for c in cols.values())]
    for label, key in (("**MFU, predicted**", "mfu"), ("MFU of the compute alone", "compute_only_mfu"),
                       ("**MFU, published**", "published")):
        body.append([label] + [f"{c[key]:.1%}" if key in c else "—" for c in cols.values()])
    return markdown_table(["share of the planned step"] + list(cols), body)


def left_out_markdown(gap: dict, first: str) -> str:
    """What the planner leaves out, each computed where a published figure allows (mfu_gap's sources)."""
    net, hours, mfu = gap["network"], gap["hours"][first], gap["columns"][first]["mfu"]
    lo_d, hi_d = mg.L3_DIURNAL
    n_int, days = mg.L3_INTERRUPTIONS
    l3 = gap["pair"][1]
    grow = f"{net['margin']:.2f}× slower" if net["margin"] else "no slowdown up to 64×"
    body = [["network contention (pods at 1:%d, [L3] §3.3.1)" % mg.L3_OVERSUBSCRIPTION,
             f"{l3}: step +1 % at an inter-node link {grow}; every inter-node byte at 1/{mg.L3_OVERSUBSCRIPTION}: "
             f"{net['at_oversubscription'].step_time_s:.1f} s, MFU {net['at_oversubscription'].mfu:.1%} (a bound)"],
            [f"failures and restarts ({n_int} interruptions in {days} days, > "
             f"{mg.L3_EFFECTIVE_TRAINING_TIME:.0%} effective time, [L3] §3.3.4)",
             f"{first}, {hours['tokens'] / 1e12:.0f}T tokens: {hours['planned']:,.0f} → "
             f"{hours['with_effective_time']:,.0f} GPU-hours"],
            [f"diurnal {lo_d:.0%}–{hi_d:.0%} throughput ([L3] §3.3.4)",
             f"{first}: MFU {mfu:.1%} → {mfu / (1 + lo_d):.1%} … {mfu / (1 + hi_d):.1%}"],
            ["kernels at the best layouts' shapes", "not timed: the GEMM ceiling was measured on one Llama 3 shape"],
            ["where the band was measured", f"{gap['error_bar'].describe()} on {', '.join(gap['error_bar_profiles'])};"
             f" H100 checks: {' and '.join(gap['h100_checks'])} (none at 64 GPUs)"]]
    return markdown_table(["left out", "computed"], body)


def emulated_markdown(emu: dict) -> str:
    """`planning.emulated_vs_predicted` as a table: kernels only and with launches, both sides."""
    w = emu["with_launches_s"]
    body = [["kernels only", f"{emu['emulated_s'] * 1e6:.1f}",
             f"{emu['closed_form_s'] * 1e6:.1f} ({emu['closed_form_vs_emulated']:.3f}×)",
             f"{emu['planner_s'] * 1e6:.1f} ({emu['planner_vs_emulated']:.3f}×)"],
            ["with host launches", f"{w * 1e6:.1f}",
             f"{emu['closed_form_with_launches_s'] * 1e6:.1f} ({emu['closed_form_vs_emulated_with_launches']:.3f}×)",
             f"{emu['planner_with_launches_s'] * 1e6:.1f} ({emu['planner_with_launches_s'] / w:.3f}×)"]]
    return markdown_table(["step, µs", "emulated", "gpt_step (predicted)", "planner (predicted)"], body)
