"""Notebook 09's tables and figures: the planner's answers as a learner reads them.

Every figure here is *predicted* (the closed-form cost model), drawn with the planner's error
band: the spread of its errors on published runs whose layouts are known
(`mgpukit.costmodel.validation`), never a confidence interval. Two rules turn a ranking into
something a learner can act on:

- **Ties.** Two layouts are tied when their predicted step times' ranges overlap:
  ``low_i ≤ high_1`` with ``(low, high) = step × (1 + band)``. Inside the band the planner cannot
  say which is faster, so the ranking says "tie", not "#2".
- **Near the memory limit.** A layout is flagged when its predicted memory per GPU is within the
  memory model's own gap of the usable memory: ``memory ≥ usable × (1 − gap)``, where ``gap`` is
  how far the model is off on the one published layout it can check (Llama 3 405B on 8,192
  H100s trained; the model predicts more than the usable memory, `published_checks`).

- `markdown_table(header, rows)`   a list of rows as a Markdown table (what `display(Markdown())` shows)
- `memory_gap()`                   the memory model's gap on Llama 3 405B at 8,192 H100s
- `ranked_rows(rows)` / `plot_ranked(rows)`   `planning.ranked`'s layouts with ties and flags
- `plot_cluster_sizes(sizes)`      days vs dollars by cluster size, with the band
- `error_rows()` / `plot_errors()` the planner's error on every published run, beside its band
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.costmodel.validation import error_bar, validation_table
from mgpukit.costmodel.training_cost import format_money
from mgpukit.lessons import mfu_gap as mg
from mgpukit.lessons.published_checks import llama3_memory_rows, published_rows
from mgpukit.plots.layout import finish
from mgpukit.plots.style import series_color


def markdown_table(header: list[str], rows: list[list]) -> str:
    """``header`` and ``rows`` (already formatted cells) as a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def memory_gap() -> dict:
    """The memory model on Llama 3 405B's published 8,192-GPU layout, which trained: the planner's
    GB per GPU over the usable GB, minus one (positive: the model is that much too high there)."""
    row = [r for r in llama3_memory_rows() if r["gpus"] == 8192][-1]
    return {"planned_gb": row["gb"], "usable_gb": row["usable_gb"], "gap": row["gb"] / row["usable_gb"] - 1}


def short_layout(layout) -> str:
    """``dp 4 × tp 2 × pp 8, ZeRO-1, SP, zb-h1, mb 1``: the degrees and choices, not the batch sum."""
    head = layout.describe().split(", micro-batch")[0]
    ckpt = "" if layout.checkpointing == "none" else f", ckpt {layout.checkpointing}"
    return f"{head}, mb {layout.micro_batch}{ckpt}"


def ranked_rows(rows: list[dict], gap: float | None = None) -> list[dict]:
    """`planning.ranked`'s rows with ``tie`` (its step range overlaps #1's) and ``near_limit``
    (memory within ``gap`` of the usable memory; default: :func:`memory_gap`)."""
    gap = memory_gap()["gap"] if gap is None else gap
    best_high = rows[0]["ranges"]["step_time_s"][1]
    out = []
    for i, r in enumerate(rows, 1):
        pl = r["plan"]
        low, high = r["ranges"]["step_time_s"]
        out.append({"rank": i, "layout": short_layout(pl.layout), "memory_gb": r["memory_gb"],
                    "usable_gb": pl.memory_limit / 1e9, "step_s": r["step_time_s"], "step_range": (low, high),
                    "mfu": r["mfu"], "days": r.get("days"), "cost": r.get("cost"),
                    "tie": i > 1 and low <= best_high,
                    "near_limit": r["memory_gb"] >= pl.memory_limit / 1e9 * (1 - gap)})
    return out


def ranked_markdown(ranked: list[dict]) -> str:
    """:func:`ranked_rows` as a table: rank (or "tie"), layout, memory (flagged), step, MFU, days, cost."""
    body = [["1" if r["rank"] == 1 else ("tie" if r["tie"] else str(r["rank"])), r["layout"],
             f"{r['memory_gb']:.1f}" + (" ⚠ near limit" if r["near_limit"] else ""),
             f"{r['step_s']:.2f} ({r['step_range'][0]:.1f}–{r['step_range'][1]:.1f})", f"{r['mfu']:.1%}",
             f"{r['days']:.0f}" if r["days"] else "—", format_money(r["cost"]) if r["cost"] else "—"]
            for r in ranked]
    return markdown_table(["#", "layout", "GB / GPU", "step s (band)", "MFU", "days", "cost"], body)


def plot_ranked(ranked: list[dict], band: str) -> go.Figure:
    """Each layout's predicted step with its band as an error bar; near-limit layouts in orange."""
    names = [f"{r['rank']}. {r['layout']}" for r in ranked][::-1]
    fig = go.Figure()
    for flag, label, color in ((False, "fits with room", series_color(0)),
                               (True, "near the memory limit", series_color(1))):
        pick = [r for r in ranked[::-1] if r["near_limit"] == flag]
        fig.add_scatter(x=[r["step_s"] for r in pick], y=[f"{r['rank']}. {r['layout']}" for r in pick],
                        mode="markers", name=label, marker=dict(color=color, size=10),
                        error_x=dict(type="data", symmetric=False,
                                     array=[r["step_range"][1] - r["step_s"] for r in pick],
                                     arrayminus=[r["step_s"] - r["step_range"][0] for r in pick]))
    fig.add_vline(x=ranked[0]["step_range"][1], line_dash="dot", line_color="grey")
    fig.update_layout(xaxis_title="step time, s (predicted)", yaxis=dict(categoryorder="array", categoryarray=names))
    ties = sum(r["tie"] for r in ranked)
    return finish(fig, title="Ranked layouts: predicted step with the planner's error band",
                  subtitle=f"dotted: #1's slowest end — {ties} of the {len(ranked) - 1} others overlap it (a tie); "
                           f"band: {band}", legend="below", plot_height=40 * len(ranked) + 80)


def plot_cluster_sizes(sizes: list[dict], band: str) -> go.Figure:
    """Days vs dollars of the same run on more GPUs: each point the fastest fitting layout."""
    pts = [s for s in sizes if s["plan"] is not None]
    days_lo, days_hi = zip(*(s["ranges"]["days"] for s in pts))
    cost_lo, cost_hi = zip(*(s["ranges"]["cost"] for s in pts))
    fig = go.Figure(go.Scatter(
        x=[s["days"] for s in pts], y=[s["cost"] / 1e6 for s in pts], mode="markers+text+lines",
        text=[f"{s['gpus']:,} GPUs" for s in pts], textposition="top right", showlegend=False,
        error_x=dict(type="data", symmetric=False, array=[h - s["days"] for h, s in zip(days_hi, pts)],
                     arrayminus=[s["days"] - lo for lo, s in zip(days_lo, pts)]),
        error_y=dict(type="data", symmetric=False, array=[(h - s["cost"]) / 1e6 for h, s in zip(cost_hi, pts)],
                     arrayminus=[(s["cost"] - lo) / 1e6 for lo, s in zip(cost_lo, pts)])))
    fig.update_layout(xaxis=dict(title="days to train (predicted)", type="log"),
                      yaxis_title="cost, million $ (predicted)")
    return finish(fig, title="Days vs dollars: the same run on more GPUs",
                  subtitle=f"each point the fastest fitting layout at that size; bars: {band}")


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


def plot_errors(rows: list[dict], framework: str | None = None) -> go.Figure:
    """The planner's optimism on each published run, the band of ``framework`` shaded."""
    bar = error_bar(framework)
    fig = go.Figure()
    fig.add_hrect(y0=bar.low, y1=bar.high, fillcolor="lightgrey", opacity=0.4, line_width=0)
    for i, fw in enumerate(dict.fromkeys(r["framework"] for r in rows)):
        pick = [r for r in rows if r["framework"] == fw]
        fig.add_scatter(x=[r["name"] for r in pick], y=[r["error"] for r in pick], mode="markers", name=fw,
                        marker=dict(color=series_color(i), size=10,
                                    symbol=["circle" if r["gpu"] == "a100" else "diamond" for r in pick]),
                        hovertext=[r["note"] for r in pick])
    fig.add_hline(y=0, line_color="grey")
    fig.update_layout(yaxis=dict(title="planner optimism (predicted / published − 1)", tickformat="+.0%"),
                      xaxis=dict(tickangle=-45))
    return finish(fig, title="The planner against published runs: predicted vs published",
                  subtitle=f"grey band: {bar.describe()}, all on {', '.join(mg.error_bar_profiles(bar))}; "
                           "diamonds: H100 runs; 'layout guessed': the paper gives no layout, the planner's own",
                  legend="below")


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
        for name, b in r.get("budgets", {}).items():
            lo, hi = b["planner_gpu_hours_range"]
            body.append([r["claim"], f"{name} (MFU {r['mfu']:.1%})", f"{b['gpu_hours']:,.0f}",
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
