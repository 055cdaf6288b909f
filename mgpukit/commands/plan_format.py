"""The tables ``mgpukit plan`` prints: one plan (memory by category, step time by term, MFU,
throughput, each with the range its error bar allows) and the ranked ``--search`` table. Every
figure is labelled predicted: the closed-form cost model's, never a measurement. The command is
:mod:`mgpukit.commands.plan`.
"""

from __future__ import annotations

from mgpukit.costmodel.memory import CATEGORIES
from mgpukit.costmodel.planner import Plan, ties_with_best
from mgpukit.costmodel.shapes import active_param_count


def _bytes(x: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:8.2f} {unit}"
    return f"{x:8.0f} B  "


def _count(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f}"


def _sec(x: float) -> str:
    return f"{x * 1e3:8.1f} ms" if x < 1 else f"{x:8.2f} s "


def _header(pl: Plan) -> list[str]:
    s, hw, fw = pl.model, pl.profile, pl.framework
    kv = f" ({s.kv_heads} kv)" if s.kv_heads != s.n_head else ""
    ffn = f"ffn {s.d_ff}{' gated' if s.gated_mlp else ''}"
    held = f"{_count(pl.params)} parameters"
    if s.is_moe:
        ffn = (f"{s.n_expert} experts of ffn {s.mlp_width}{' gated' if s.gated_mlp else ''}, top-{s.top_k}, "
               f"capacity factor {s.capacity_factor:g}")
        held += f" held ({_count(active_param_count(s))} active per token)"
    return [
        f"model    {s.name}: {held}, {s.n_layer} layers, d_model {s.d_model}, "
        f"{s.n_head} heads{kv}, {ffn}, seq {s.seq_len}, vocab {s.vocab}",
        f"cluster  {pl.gpus} GPUs of profile {hw.name} ({hw.gpus_per_node} per node): {hw.description}",
        f"framework {fw.name}: dp sync {fw.dp_sync}, kernels × {fw.kernel_efficiency:g} "
        f"({fw.description})",
        f"error bar {pl.error_bar.describe()}" + _unchecked(pl.unchecked),
        f"          rests on: {_runs(pl.error_bar.runs)}",
    ]


def _runs(names) -> str:
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} and {len(names) - 3} more"


def _unchecked(features) -> str:
    return f"; not among those runs: {', '.join(features)} (the error may be larger)" if features else ""


def _range(lo_hi, fmt) -> str:
    return f"({fmt(lo_hi[0]).strip()} … {fmt(lo_hi[1]).strip()})"


def format_plan(pl: Plan) -> str:
    """The readable report of one plan; every figure is labelled predicted."""
    t, mem = pl.time, pl.memory
    lines = _header(pl) + [f"layout   {pl.layout.describe()}", "",
                           "predicted memory per GPU (fullest pipeline stage)"]
    lines += [f"  {c:<12}{_bytes(mem[c])}" for c in CATEGORIES]
    verdict = "FITS" if pl.fits else "DOES NOT FIT"
    lines.append(f"  {'total':<12}{_bytes(mem['total'])}   of {_bytes(pl.memory_limit).strip()} usable "
                 f"({pl.profile.usable_memory:.0%} of {_bytes(pl.profile.memory_bytes).strip()})  -> {verdict}")
    lo, hi = pl.memory_range
    lines.append(f"  real peak   {_bytes(lo).strip()} … {_bytes(hi).strip()} by the memory bar "
                 f"({pl.memory_bar.describe()})  -> {pl.memory_verdict}")
    if not pl.fits:
        lines.append(f"  hint: {_advice(pl)}")
    lines += ["", "predicted step time"]
    rows = [("GEMMs", t["compute_s"]), ("memory-bound", t["memory_s"]), ("tp comm", t["comm_tp_s"]),
            ("cp comm", t["comm_cp_s"]), ("ep comm", t.get("comm_ep_s", 0.0)), ("pp comm", t["comm_pp_s"]),
            ("dp comm", t["comm_dp_s"]),
            ("bubble", t["bubble_s"]), ("optimizer", t["optimizer_s"]),
            ("interference", t.get("interference_s", 0.0)), ("straggler", t.get("straggler_s", 0.0)),
            ("total", t["total_s"])]
    if pl.layout.cp == 1:
        rows = [r for r in rows if r[0] != "cp comm"]
    if pl.layout.ep == 1:
        rows = [r for r in rows if r[0] != "ep comm"]
    if not pl.profile.gpu_spread:  # a whole-run rate (A100 profiles): the slowest GPU's pace is inside it
        rows = [r for r in rows if r[0] != "straggler"]
    g = pl.profile.gemm
    cap = (f"   (streamed for seconds: at most {g.sustained:.1%} of peak, the power limit measured on this GPU)"
           if g is not None and g.sustained and pl.layout.dtype != "fp32" else "")
    lines += [f"  {name:<12}{_sec(v)}" + (cap if name == "GEMMs" else "") for name, v in rows]
    r = pl.ranges
    lines[-1] += f"   {_range(r['step_time_s'], _sec)} from the error bar"
    lines += ["", f"predicted MFU             {t['mfu']:6.1%}   {_range(r['mfu'], lambda x: f'{x:.1%}')}"
                  f"   (hardware FLOPs utilisation {t['hfu']:.1%})",
              f"predicted bubble          {t['bubble_fraction']:6.1%}",
              f"predicted throughput      {t['tokens_per_s']:,.0f} tokens/s   "
              f"{_range(r['tokens_per_s'], lambda x: f'{x:,.0f}')}",
              "predicted sent per GPU    " + ", ".join(f"{k} {_bytes(pl.comm_bytes[k]).strip()}" for k in ("dp", "tp", "pp", "cp", "ep")
                                          if (k != "cp" or pl.layout.cp > 1) and (k != "ep" or pl.layout.ep > 1))
              + " per step",
              "(analytical cost model: predictions, not measurements)"]
    return "\n".join(lines)


def _advice(pl: Plan) -> str:
    mem, lay = pl.memory, pl.layout
    if max(CATEGORIES, key=lambda c: mem[c]) == "activations":
        # under flash attention selective recomputation frees only the log-sum-exp: suggest full
        policies = ("full",) if lay.flash_attention else ("selective", "full")
        steps = [f"--ckpt {c}" for c in policies if c != lay.checkpointing][:1]
        steps += ["a smaller --micro-batch" if lay.micro_batch > 1 else "more --tp or --pp"]
        if lay.tp > 1 and not lay.sp:
            steps.append("--sp")
        return "activations dominate: try " + ", ".join(steps)
    ep = (f"more --ep (up to {pl.model.n_expert}: the experts split), "
          if pl.model.is_moe and lay.ep < pl.model.n_expert else "")
    if lay.zero < 3 and lay.dp * lay.ep > 1:
        return f"model states dominate: try --zero {lay.zero + 1}, or {ep}more --tp or --pp"
    if ep:
        return f"model states dominate: try {ep}more --tp or --pp"
    return "model states dominate: try more --tp or --pp (or more GPUs)"


def _fit_mark(pl: Plan) -> str:
    return {"fits": "yes", "near the limit": "near", "may fit": "may", "does not fit": "NO"}[pl.memory_verdict]


def format_search(plans: list[Plan], *, gpus: int, global_batch: int) -> str:
    """A ranked table of plans (fitting ones first, fastest first)."""
    if not plans:
        return f"no valid layout for {gpus} GPUs and global batch {global_batch}"
    lines = _header(plans[0]) + [
        f"search   global batch {global_batch}; ranked by predicted step time", "",
        f"{'#':>3} {'dp':>4} {'tp':>3} {'cp':>2} {'ep':>3} {'pp':>3} {'zero':>4} {'schedule':<14} {'mb×m':>9} {'ckpt':<9} "
        f"{'pred. mem/GPU':>13} {'pred. step':>11} {'step range':>19} {'pred. MFU':>9} {'MFU range':>13} "
        f"{'bubble':>6}  fits  tie  stages",
    ]
    ties = ties_with_best(plans)
    for i, pl in enumerate(plans, 1):
        lay, r = pl.layout, pl.ranges
        sched = (lay.schedule + (f" v={lay.v}" if lay.v > 1 else "")) if lay.pp > 1 else "-"
        stages = "/".join(map(str, lay.stage_layers)) if lay.stage_layers else ("even" if lay.pp > 1 else "-")
        if len(stages) > 24:
            stages = stages[:21] + "..."
        lines.append(
            f"{i:>3} {lay.dp:>4} {lay.tp:>3} {lay.cp:>2} {lay.ep:>3} {lay.pp:>3} {lay.zero:>4} {sched:<14} "
            f"{f'{lay.micro_batch}×{lay.num_micro_batches}':>9} {lay.checkpointing:<9} "
            f"{_bytes(pl.memory['total']):>13} {_sec(pl.step_time_s).strip():>11} "
            f"{_range(r['step_time_s'], _sec):>19} {pl.mfu:>9.1%} {_range(r['mfu'], lambda x: f'{x:.1%}'):>13} "
            f"{pl.bubble_fraction:>6.1%}  {_fit_mark(pl):<4}  {'=1' if ties[i - 1] and i > 1 else '  '}   {stages}"
        )
    if not plans[0].fits:
        lines.append(f"no layout fits in {_bytes(plans[0].memory_limit).strip()} per GPU; shown: the ones needing "
                     f"the least memory. Try more GPUs or a smaller model.")
    if sum(ties) > 1:
        lines.append(f"tie (=1): {sum(ties) - 1} layout(s) predicted within #1's range from the error bar "
                     f"(≤ {plans[0].ranges['step_time_s'][1] / plans[0].step_time_s - 1:+.0%}): the planner cannot rank them")
    if any(pl.memory_verdict == "near the limit" for pl in plans):
        lines.append("fits 'near': fits as predicted, not at the top of the memory bar "
                     f"({plans[0].memory_bar.describe()})")
    lines.append(f"ranges: the planner's {plans[0].error_bar.describe()}"
                 + _unchecked(sorted(set().union(*(pl.unchecked for pl in plans)))))
    lines.append("(analytical cost model: predictions, not measurements)")
    return "\n".join(lines)
