"""Notebook 09: plan a cluster — the planner's answers, and what they would cost.

- `explain(model, gpus, profile, **layout)`  one plan, and a sentence: does it fit, and if not,
                                   which single change would make it fit (each one planned)
- `single_changes(plan)`           the candidate changes, one at a time, and whether each fits
- `speedup_curve(...)`             the layout's tp × pp (and options) on 1 … 1,024 GPUs, dp filling
                                   the rest, against one GPU with enough memory
- `ranked(...)`                    `search`'s ranked layouts with time to train and cost
- `cluster_sizes(...)`             the best layout at several GPU counts: time vs money
- `rules_of_thumb()`               the seeds' GPU-hour and GPU-count claims, checked with 6·N·D
                                   and the planner (the arithmetic shown, a verdict computed)
- `emulated_vs_predicted(...)`     one small layout run under the virtual clock beside the
                                   planner's and the closed-form predictions

Published runs as checks are in `mgpukit.lessons.published_checks`.
Everything but `emulated_vs_predicted` is closed-form arithmetic (no torch, milliseconds).
"""
from __future__ import annotations

import dataclasses
import statistics
import warnings

from mgpukit.config import RunConfig
from mgpukit.costmodel.gpt_step import ddp_step_time
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout, LayoutError
from mgpukit.costmodel.planner import plan, search
from mgpukit.costmodel.shapes import ModelShape, get_shape, param_count
from mgpukit.costmodel.training_cost import format_duration, six_nd, time_to_train, tokens_for_gpu_hours
from mgpukit.experiment import run
from mgpukit.runtime.launcher import OversubscribedWarning

GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models"
# A published H100 MFU, beside the planner's ceiling: Llama 3 405B on 16,384 H100s, 41 % BF16 MFU
# (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4).
PUBLISHED_MFU, PUBLISHED_MFU_RUN = 0.41, "Llama 3 405B on 16,384 H100s, Dubey et al. 2024, Table 4"


def make_layout(*, gpus: int, global_batch: int = 512, **asked) -> Layout:
    """A layout on `gpus` GPUs as the explorer asks it: `Layout.on_gpus` (dp fills the GPUs,
    micro-batches from the global batch), with a global batch of 512 sequences unless asked; the
    explorer's v counts only with the interleaved schedule."""
    if asked.get("schedule") != "interleaved":
        asked["v"] = 1
    return Layout.on_gpus(gpus, global_batch=global_batch, **asked)


def _change(layout: Layout, n_gpus: int, **kw):
    """(layout, gpus) with `kw` changed (``gpus`` too), dp re-derived; None when it cannot run."""
    gpus = kw.pop("gpus", n_gpus)
    fields = {**dataclasses.asdict(layout), **kw}
    fields.pop("num_micro_batches")
    fields.pop("dp")
    if fields["cp"] != 1:  # the explorer's layouts have no context parallelism
        return None
    try:
        return make_layout(gpus=gpus, global_batch=layout.global_batch, **fields), gpus
    except LayoutError:
        return None


def single_changes(pl) -> list[dict]:
    """Single changes to a plan's layout, each planned, fitting or not: ``{"change", "plan",
    "fits", "memory"}`` — a what-if table for a cluster-scale layout. Not `mgpukit.fits.fixes`,
    which answers another question: the fewest *combined* flags (`--global-batch`,
    `--checkpointing`, `--optimizer`, …) that make one of the kit's own runs fit this machine,
    only the fitting ones, as words for a refusal. Tried here:
    the next ZeRO stage, more checkpointing, a smaller micro-batch, twice the tp (within a node)
    or pp, twice the GPUs (more dp), bf16 instead of fp32. Each is planned in the plan's own
    framework. Selective checkpointing is offered only without fused attention: it recomputes the
    attention core to free its s×s scores (Korthikanti et al. 2022), which flash attention never
    stores, so under flash it predicts what no checkpointing does."""
    lay, hw = pl.layout, pl.profile
    tries = []
    if lay.zero < 3 and lay.dp > 1:
        tries.append((f"ZeRO-{lay.zero + 1}", dict(zero=lay.zero + 1)))
    more = ("selective", "full")[("none", "selective", "full").index(lay.checkpointing):]
    for c in more:
        if c != lay.checkpointing and not (c == "selective" and lay.flash_attention):
            tries.append((f"checkpointing {c}", dict(checkpointing=c)))
    if lay.micro_batch > 1:
        tries.append((f"micro-batch {lay.micro_batch // 2}", dict(micro_batch=lay.micro_batch // 2)))
    if 2 * lay.tp <= hw.gpus_per_node:
        tries.append((f"tp {2 * lay.tp}", dict(tp=2 * lay.tp)))
    tries.append((f"pp {2 * lay.pp}", dict(pp=2 * lay.pp)))
    if lay.dtype == "fp32":
        tries.append(("bf16 mixed precision", dict(dtype="bf16")))
    tries.append((f"{2 * pl.gpus} GPUs", dict(gpus=2 * pl.gpus)))
    out = []
    for name, kw in tries:
        changed = _change(lay, pl.gpus, **kw)
        if changed is None:
            continue
        try:
            p = plan(pl.model, changed[1], hw, changed[0], framework=pl.framework)
        except LayoutError:
            continue
        out.append({"change": name, "plan": p, "fits": p.fits, "memory": p.memory["total"]})
    return out


def fit_sentence(pl) -> str:
    """Why the plan does (not) fit, and — computed, not guessed — what would make it fit."""
    gb = 1e9
    mem, limit = pl.memory, pl.memory_limit
    if pl.fits:
        lo, hi = pl.ranges["mfu"]
        return (f"Fits: {mem['total'] / gb:.1f} GB of {limit / gb:.1f} GB usable per GPU "
                f"({mem['total'] / limit:.0%}); predicted MFU {pl.mfu:.1%} ({lo:.1%} … {hi:.1%}: the planner's "
                f"{pl.error_bar.describe()}).")
    worst = max(("params", "grads", "optimizer", "activations"), key=lambda c: mem[c])
    ok = [f for f in single_changes(pl) if f["fits"]]
    ok.sort(key=lambda f: f["plan"].step_time_s)
    fix = (f"It would fit with {ok[0]['change']} ({ok[0]['memory'] / gb:.1f} GB, step "
           f"{ok[0]['plan'].step_time_s:.2f} s)" + (f"; also with {', '.join(f['change'] for f in ok[1:3])}"
                                                     if len(ok) > 1 else "") + "."
           if ok else _no_single_fix(pl))
    return (f"Does not fit: {mem['total'] / gb:.1f} GB needed, {limit / gb:.1f} GB usable per GPU; the largest "
            f"part is {worst} ({mem[worst] / gb:.1f} GB). {fix}")


def _no_single_fix(pl) -> str:
    lay = pl.layout
    best = search(pl.model, pl.gpus, pl.profile, global_batch=lay.global_batch, top=1, dtype=lay.dtype,
                  framework=pl.framework, flash_attention=lay.flash_attention)
    if not best:
        return (f"No single change fits, and no layout of {pl.gpus} GPUs does at global batch "
                f"{pl.layout.global_batch}: add GPUs.")
    return (f"No single change fits; the fastest layout that does (search) is {best[0].layout.describe()} "
            f"({best[0].memory['total'] / 1e9:.1f} GB, step {best[0].step_time_s:.2f} s).")


def explain(model: str, gpus: int, profile: str, **layout) -> dict:
    """One plan (`make_layout(**layout)`) with its fit sentence; ``error`` when it cannot run."""
    try:
        pl = plan(model, gpus, profile, make_layout(gpus=gpus, **layout))
    except LayoutError as e:
        return {"plan": None, "sentence": f"Cannot run: {e}", "error": str(e)}
    return {"plan": pl, "sentence": fit_sentence(pl), "error": None}


def speedup_curve(model: str, profile: str, *, tp: int = 1, pp: int = 1, gpu_counts=GPU_COUNTS,
                  global_batch: int = 1024, **layout) -> list[dict]:
    """Predicted speedup on N GPUs (dp = N / (tp·pp), same global batch) over one GPU running the
    whole step (memory ignored: a 70B model fits no single GPU, the time is still defined)."""
    shape, hw = get_shape(model), load_profile(profile)
    mb = layout.get("micro_batch", 1)
    base_kw = {k: v for k, v in layout.items() if k in ("checkpointing", "dtype", "micro_batch")}
    one = plan(shape, 1, hw, make_layout(gpus=1, global_batch=global_batch, **base_kw)).step_time_s
    rows = []
    for n in gpu_counts:
        if n % (tp * pp) or global_batch % ((n // (tp * pp)) * mb):
            continue
        try:
            pl = plan(shape, n, hw, make_layout(gpus=n, tp=tp, pp=pp, global_batch=global_batch, **layout))
        except LayoutError:
            continue
        rows.append({"gpus": n, "step_time_s": pl.step_time_s, "speedup": one / pl.step_time_s,
                     "efficiency": one / pl.step_time_s / n, "fits": pl.fits, "mfu": pl.mfu})
    return rows


def ranked(model: str, gpus: int, profile: str, *, global_batch: int = 512, tokens: float | None = None,
           price_per_gpu_hour: float | None = None, top: int = 10) -> list[dict]:
    """`search`'s fitting layouts, fastest first, each with time to train and cost when given.
    ``ranges`` holds (low, high) of step time and MFU — and, with ``tokens``, of seconds, days,
    GPU-hours and cost — from the planner's error bar (``error_bar``: its errors on published
    runs of the same framework)."""
    rows = []
    for pl in search(model, gpus, profile, global_batch=global_batch, top=top):
        row = {"layout": pl.layout.describe(), "plan": pl, "memory_gb": pl.memory["total"] / 1e9,
               "step_time_s": pl.step_time_s, "mfu": pl.mfu, "ranges": dict(pl.ranges),
               "error_bar": pl.error_bar.describe()}
        if tokens:
            budget = time_to_train(pl, tokens, price_per_gpu_hour=price_per_gpu_hour)
            ranges = {**row["ranges"], **budget.pop("ranges")}
            budget.pop("error_bar")
            row.update(budget, ranges=ranges)
        rows.append(row)
    return rows


def cluster_sizes(model: str, profile: str, *, gpu_counts=(64, 128, 256, 512, 1024), global_batch: int = 1024,
                  tokens: float = 2e12, price_per_gpu_hour: float = 2.0) -> list[dict]:
    """The fastest fitting layout at each GPU count with its wall time and cost for `tokens`."""
    rows = []
    for n in gpu_counts:
        best = search(model, n, profile, global_batch=global_batch, top=1)
        if not best:
            rows.append({"gpus": n, "plan": None})
            continue
        rows.append({"gpus": n, "plan": best[0], **time_to_train(best[0], tokens, price_per_gpu_hour=price_per_gpu_hour)})
    return rows


# ------------------------------------------------------------------ the seeds' rules of thumb

SEED = "RunPod's multi-GPU training guide (one of the background articles), FAQ"
GPU_HOUR_CLAIMS = (  # (model, low, high): "training a 7B model takes 100-500 GPU-hours, while 70B
    ("7b", 100, 500),  # models require 5,000-20,000 GPU-hours depending on dataset size and
    ("70b", 5_000, 20_000),  # optimization level"
)


def rule_gpu_hours(model: str, low: float, high: float, *, profile: str = "h100-ib", gpus: int = 64,
                   global_batch: int = 1024) -> dict:
    """A "model X takes low-high GPU-hours" claim against 6·N·D at the planner's MFU (best layout on
    `gpus` GPUs): the token budget the claim implies, and what real budgets cost — with the
    planner's own step-by-step GPU-hours and their range from its error bar. The one home of
    this check: notebook 10's list of the articles' claims should quote the same figures."""
    shape, hw = get_shape(model), load_profile(profile)
    n = param_count(shape)
    best = search(shape, gpus, hw, global_batch=global_batch, top=1)[0]
    peak, mfu = hw.flops("bf16"), best.mfu
    implied = [tokens_for_gpu_hours(h, n, peak_flops=peak, mfu=mfu) for h in (low, high)]
    # the planner's MFU is a ceiling; at a published run's MFU the same GPU-hours buy fewer tokens
    published = [tokens_for_gpu_hours(h, n, peak_flops=peak, mfu=PUBLISHED_MFU) for h in (low, high)]
    budgets = {"Chinchilla-optimal (20 tokens/parameter)": CHINCHILLA_TOKENS_PER_PARAM * n,
               "Llama 2's 2T tokens": 2e12}
    costs = {}
    for name, d in budgets.items():
        planned = time_to_train(best, d)
        costs[name] = {"tokens": d, **six_nd(n, d, peak_flops=peak, mfu=mfu),
                       "planner_gpu_hours": planned["gpu_hours"],
                       "planner_gpu_hours_range": planned["ranges"]["gpu_hours"]}
    chin = costs["Chinchilla-optimal (20 tokens/parameter)"]
    verdict = (f"holds only for {implied[0] / 1e9:.3g}-{implied[1] / 1e9:.3g} B tokens at the planner's {mfu:.0%} MFU "
               f"({published[0] / 1e9:.3g}-{published[1] / 1e9:.3g} B at a published {PUBLISHED_MFU:.0%}): "
               f"{implied[0] / n:.2g}-{implied[1] / n:.2g} per parameter, a fine-tuning budget; Chinchilla-optimal "
               f"needs {chin['gpu_hours'] / high:.1f}× its upper end")
    return {"claim": f"a {model} model takes {low:,}-{high:,} GPU-hours", "source": SEED, "model": model,
            "params": n, "profile": profile, "mfu": mfu, "layout": best.layout.describe(), "plan": best, "gpus": gpus,
            "implied_tokens": implied, "implied_tokens_published_mfu": published, "budgets": costs, "verdict": verdict,
            "holds_for_pretraining": chin["gpu_hours"] <= high}


def rule_gpu_count(model: str = "70b", *, low: int = 16, high: int = 32, profile: str = "a100-nvlink",
                   global_batch: int = 1024, counts=(8, 16, 32, 64), tokens: float = 2e12) -> dict:
    """"With 80GB A100s using model parallelism, you can train [70B] with 16-32 GPUs": the fewest
    GPUs with a fitting layout, and how long `tokens` would take on the claim's GPU counts."""
    fit = {}
    for n in counts:
        best = search(model, n, profile, global_batch=global_batch, top=1)
        fit[n] = best[0] if best else None
    fewest = next((n for n in counts if fit[n] is not None), None)
    wall = {n: time_to_train(fit[n], tokens) for n in (low, high) if fit.get(n) is not None}
    verdict = (f"on {profile}: " + (f"fits from {fewest} GPUs ({fit[fewest].layout.describe()})" if fewest else
                                    f"fits on none of {counts}")) + "; " + "; ".join(
        f"{tokens / 1e12:g}T tokens on {n} GPUs take {format_duration(w['seconds'])}" for n, w in wall.items())
    return {"claim": f"a {model} model trains on {low}-{high} 80 GB A100s", "source": SEED, "fewest_gpus": fewest,
            "plans": fit, "wall": wall, "verdict": verdict,
            "memory_claim_holds": fewest is not None and fewest <= high}


def rules_of_thumb() -> list[dict]:
    """Every checked claim of the seeds, each with its arithmetic and verdict."""
    return [rule_gpu_hours(m, lo, hi) for m, lo, hi in GPU_HOUR_CLAIMS] + [rule_gpu_count()]


# ------------------------------------------------------------------ emulated beside predicted

def emulated_vs_predicted(*, workers: int = 2, steps: int = 3, global_batch: int = 8,
                          profile: str = "h100-nvlink") -> dict:
    """DDP on the tiny GPT, `workers` ranks under the virtual clock of `profile` — with its host
    launches (``with_launches_s``) and on its kernels alone (``emulated_s``) — beside the
    planner's step time (same layout, fp32) and the closed form the emulator is validated by
    (`costmodel.gpt_step.ddp_step_time`, op by op). Both closed forms count kernels, not launches:
    the ratios are against the kernels-only clock."""
    cfg = RunConfig(global_batch=global_batch)
    shape = ModelShape.from_gpt_config(cfg.model_config(), name="gpt-tiny")
    layout = Layout.from_global_batch(global_batch=global_batch, dp=workers, micro_batch=global_batch // workers,
                                      dtype="fp32")
    hw = load_profile(profile)
    steady = lambda rec: statistics.median(rec["step_time_s"][1:] or rec["step_time_s"])  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        # as a GPU would run it (host launches included), and its kernels alone — what the two
        # closed forms count (`HardwareProfile.kernels_only`)
        launched, record = (run("ddp", workers=workers, mode="emulated", profile=p, steps=steps,
                                global_batch=global_batch, parity=False) for p in (hw, hw.kernels_only()))
    emulated = steady(record)
    planner = plan(shape, workers, hw.kernels_only(), layout)  # kernels, as the clock it is set beside
    closed = ddp_step_time(cfg.model_config(), global_batch=global_batch, workers=workers,
                           profile=hw.kernels_only())["total_s"]
    # and with the host's launches on both sides (one convention: the closed forms charge them too)
    closed_launched = ddp_step_time(cfg.model_config(), global_batch=global_batch, workers=workers,
                                    profile=hw)["total_s"]
    return {"workers": workers, "profile": profile, "layout": layout.describe(), "record": record,
            "with_launches_s": steady(launched), "emulated_s": emulated,
            "planner_s": planner.step_time_s, "closed_form_s": closed,
            "planner_vs_emulated": planner.step_time_s / emulated, "closed_form_vs_emulated": closed / emulated,
            "closed_form_with_launches_s": closed_launched,
            "closed_form_vs_emulated_with_launches": closed_launched / steady(launched),
            "planner_with_launches_s": plan(shape, workers, hw, layout).step_time_s,
            "planner": planner}

