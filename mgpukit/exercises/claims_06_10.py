"""The claims notebooks 06-10 make beside a table, checked on the executed notebook (`claims`).

Each function reads the table of the cell tagged `claim:<name>` and returns what is wrong, or None.
"""
from __future__ import annotations

import re

from mgpukit.exercises.claims import claim, number, table, tagged_text


def _rows(nb: dict, name: str, header: str) -> list[list[str]]:
    """The rows of the tagged cell's table that follow the header line starting with `header`."""
    rows = table(nb, name)
    start = next(i for i, r in enumerate(rows) if r[0] == header)
    return rows[start + 1:]


# ---- 06 · sharding
@claim("06_sharding")
def ddp_does_not_fit_zero1_does(nb: dict) -> str | None:
    """Section 1: a 7B model's DDP model states exceed an H100's usable memory, ZeRO-1's do not,
    and ZeRO-3's are the DDP total divided by dp = 64."""
    rows = {r[0]: [number(c) for c in r[1:]] for r in _rows(nb, "states-7b", "layout (dp=64)")[:4]}
    usable = float(re.search(r"H100 usable: ([\d.]+) GB", tagged_text(nb, "states-7b")).group(1))
    wrong = []
    if not rows["DDP"][3] > usable >= rows["ZeRO-1"][3]:
        wrong.append(f"DDP {rows['DDP'][3]} / ZeRO-1 {rows['ZeRO-1'][3]} GB against {usable} GB usable")
    if abs(rows["ZeRO-3"][3] * 64 - rows["DDP"][3]) > 0.01 * rows["DDP"][3]:
        wrong.append(f"ZeRO-3's {rows['ZeRO-3'][3]} GB is not DDP's / 64")
    return "; ".join(wrong) or None


@claim("06_sharding")
def zero_by_hand_is_ddp(nb: dict) -> str | None:
    """Section 2: reduce-scatter, a shard's step and all-gather give DDP's weights bit for bit."""
    text = tagged_text(nb, "by-hand")
    return None if text.strip().endswith("bit for bit: True") else f"the step by hand reads {text.strip()!r}"


@claim("06_sharding")
def measured_memory_is_the_formula(nb: dict) -> str | None:
    """Section 3: every strategy's measured model-state bytes equal the formula's (no padding on 2 ranks)."""
    rows = _rows(nb, "memory", "strategy")
    off = [r[0] for r in rows if abs(number(r[3]) - 1) >= 5e-4]
    return None if len(rows) == 5 and not off else f"measured ≠ predicted for {off or 'a missing row'}"


@claim("06_sharding")
def zero12_cost_ddp_fsdp2_below_zero3(nb: dict) -> str | None:
    """Section 4: ZeRO-1 and ZeRO-2 send what DDP sends; FSDP2 (root kept gathered) below ZeRO-3's 1.5×."""
    x = {r[0]: number(r[2]) for r in _rows(nb, "volume", "strategy")}
    if abs(x["zero1"] - 1) > 1e-3 or abs(x["zero2"] - 1) > 1e-3:
        return f"ZeRO-1/2 send {x['zero1']}, {x['zero2']} × DDP"
    return None if x["fsdp2"] < x["zero3"] else f"fsdp2 {x['fsdp2']} is not below zero3 {x['zero3']}"


@claim("06_sharding")
def zero3_prefetches_a_gather(nb: dict) -> str | None:
    """Section 5: on the emulated clock at least one of zero3's all-gathers arrives while the
    previous block computes (the prefetch)."""
    text = tagged_text(nb, "prefetch-run")
    hidden = int(re.search(r"\(the prefetch\): (\d+)", text).group(1))
    return None if hidden >= 1 else "no all-gather was prefetched"


@claim("06_sharding")
def the_prefetch_rule_is_the_comparison(nb: dict) -> str | None:
    """Section 5's rule: prefetch hides a block's gather exactly when tokens per micro-batch >
    F/β·(N−1)/N — the rule agrees with the cost model's gather-vs-forward on every row, the rows
    fall on both sides, and one 4,096-token sequence clears it."""
    rows = _rows(nb, "prefetch-rule", "tokens per micro-batch")
    verdicts = [(r[3], r[4]) for r in rows]
    if len(rows) != 4 or any(a != b for a, b in verdicts):
        return f"rule and comparison disagree: {rows}"
    if {a for a, _ in verdicts} != {"True", "False"}:
        return "every row falls on one side of the bound"
    by_tokens = {int(number(r[0])): r[3] for r in rows}
    return None if by_tokens.get(4096) == "True" else "a 4,096-token sequence does not clear the bound"


# ---- 07 · memory and precision
@claim("07_memory_and_precision")
def autocast_keeps_16_bytes_per_parameter(nb: dict) -> str | None:
    """Section 1: autocast keeps 4 + 4 + 8 bytes per parameter, and the total equals the ZeRO table's."""
    rows = {r[0]: r[1:] for r in _rows(nb, "states", "bytes")}
    per = [number(rows[c][2]) for c in ("params", "grads", "optimizer")]
    if per != [4, 4, 8]:
        return f"measured bytes per parameter {per}, not 4, 4, 8"
    total = rows["total"]
    return None if number(total[0]) == number(total[1]) else f"totals differ: {total}"


@claim("07_memory_and_precision")
def activations_overtake_model_states_past_the_bound(nb: dict) -> str | None:
    """Section 2's rule: activations overtake a layer's model states exactly when s·b > 96h/17;
    the cost model agrees on every row, and the rows fall on both sides."""
    rows = _rows(nb, "overtake", "s·b tokens")
    verdicts = [(r[3], r[4]) for r in rows]
    if len(rows) != 4 or any(a != b for a, b in verdicts):
        return f"rule and cost model disagree: {rows}"
    return None if {a for a, _ in verdicts} == {"True", "False"} else "every row falls on one side of the bound"


@claim("07_memory_and_precision")
def checkpointing_keeps_less_and_changes_no_number(nb: dict) -> str | None:
    """Section 3: full checkpointing keeps under half the activations, selective over 95 % here,
    and all three runs end on the same loss."""
    rows = {r[0]: r for r in _rows(nb, "checkpointing", "checkpointing")}
    wrong = []
    if not number(rows["full"][2]) < 0.5 or not number(rows["selective"][2]) > 0.95:
        wrong.append(f"kept: full {rows['full'][2]}, selective {rows['selective'][2]}")
    if len({r[3] for r in rows.values()}) != 1:
        wrong.append(f"final losses differ: {[r[3] for r in rows.values()]}")
    return "; ".join(wrong) or None


@claim("07_memory_and_precision")
def recomputing_costs_time_on_the_emulated_clock(nb: dict) -> str | None:
    """Section 3: on the emulated H100, full checkpointing's step > selective's > none's, and
    full costs less than the textbook's upper bound of one extra forward + backward (2×)."""
    x = {r[0]: number(r[2]) for r in _rows(nb, "checkpointing-emulated", "checkpointing")}
    return None if 2 > x["full"] > x["selective"] > x["none"] == 1 else f"emulated × none: {x}"


@claim("07_memory_and_precision")
def the_scaler_starts_at_2_16(nb: dict) -> str | None:
    """Section 4: the fp16 loss scaler starts at S = 2¹⁶ (the text says so)."""
    text = tagged_text(nb, "precision")
    return None if "started 65,536," in text else f"the scaler line reads {text.splitlines()[-1]!r}"


@claim("07_memory_and_precision")
def bf16_activations_are_more_than_half(nb: dict) -> str | None:
    """Section 4: bf16 activations are more than half of fp32's (autocast keeps 16-bit weight copies)."""
    text = tagged_text(nb, "act-dtype")
    ratio = float(re.search(r"bf16 / fp32 activations: ([\d.]+)", text).group(1))
    return None if ratio > 0.5 else f"bf16 / fp32 = {ratio}"


@claim("07_memory_and_precision")
def an_overflow_skips_the_step_and_halves_s(nb: dict) -> str | None:
    """Section 4: started at 2²⁰ the scaler skips steps; each skip halves S; every rank skips the same."""
    rows = _rows(nb, "hot", "step")
    hist = [(number(r[1]), r[2] == "True") for r in rows if len(r) == 3]
    skipped = [i for i, (_, applied) in enumerate(hist) if not applied]
    if not skipped:
        return "no step was skipped"
    if any(hist[i + 1][0] != hist[i][0] / 2 for i in skipped if i + 1 < len(hist)):
        return f"a skip did not halve S: {hist}"
    same = re.search(r"history: (\d+) of (\d+)", tagged_text(nb, "hot"))
    return None if same and same.group(1) == same.group(2) else "the ranks' histories differ"


@claim("07_memory_and_precision")
def size_decides_what_bf16_buys(nb: dict) -> str | None:
    """Section 4: on the H100 (reference file) the smallest GEMM's bf16 gain is under half of every other's."""
    rows = _rows(nb, "gemm", "GEMM (m×k)·(k×n)")
    gains = [float(r[5].rstrip("×")) for r in rows if len(r) == 7]
    return None if len(gains) >= 2 and min(gains[1:]) > 2 * gains[0] else f"bf16 / fp32 gains {gains}"


@claim("07_memory_and_precision")
def the_kernel_model_misses_the_smallest_gemms_gain(nb: dict) -> str | None:
    """Section 4: for the smallest GEMM the kernel model predicts over twice the bf16 gain the H100 measured."""
    r = _rows(nb, "gemm", "GEMM (m×k)·(k×n)")[0]
    measured, predicted = (float(x.rstrip("×")) for x in r[5:7])
    return None if predicted > 2 * measured else f"smallest GEMM: measured ×{measured}, predicted ×{predicted}"


# ---- 08 · hybrid 3D
def _times(text: str) -> list[float]:
    """Every '×1.23' multiple printed in `text`, in order."""
    return [float(x) for x in re.findall(r"×([\d.]+)", text)]


@claim("08_hybrid_3d")
def tp_all_reduces_are_counted_by_the_picture(nb: dict) -> str | None:
    """Section 1: each stage's tp all-reduces are 4 per block and micro-batch plus the embedding
    (stage 0) or the output layer and the loss (stage 1) — the cost model's counts."""
    pairs = re.findall(r"= (\d+); the cost model: (\d+)", tagged_text(nb, "tp-count"))
    return None if len(pairs) == 2 and all(a == b for a, b in pairs) else f"formula vs cost model: {pairs}"


@claim("08_hybrid_3d")
def tp_across_nodes_costs_more_than_pp(nb: dict) -> str | None:
    """Section 4: moving tensor parallelism across nodes (2 → 1 GPU/node) costs more than moving
    the pipeline (8 → 4), on gpt-tiny and GPT-3 1.3B (predicted, kernels only) and GPT-2 (emulated
    and predicted)."""
    wrong = []
    for name in ("placements", "scale"):
        pp, tp = _times(tagged_text(nb, name))[:2]
        if not tp > pp:
            wrong.append(f"{name}: tp ×{tp} not above pp ×{pp}")
    pp, tp_emulated, tp_predicted = _times(tagged_text(nb, "gpt2"))[:3]
    if not (tp_emulated > pp and tp_predicted > pp):
        wrong.append(f"gpt2: pp ×{pp}, tp ×{tp_emulated} emulated, ×{tp_predicted} predicted")
    return "; ".join(wrong) or None


@claim("08_hybrid_3d")
def launches_hide_the_links_at_micro_batch_1(nb: dict) -> str | None:
    """Section 4: with the host's launches, GPT-3 1.3B at micro-batch 1 is launch-bound (over half
    of every step) and the one-node-to-eight-nodes spread is under half of the kernels-only one."""
    text = tagged_text(nb, "hosted")
    hosted, kernels = _times(text)[:2]
    low = float(re.search(r"issuing kernels is (\d+)%", text).group(1)) / 100
    if low <= 0.5:
        return f"issuing kernels is only {low:.0%} of a step"
    return None if hosted - 1 < (kernels - 1) / 2 else f"launches spread ×{hosted} vs kernels ×{kernels}"


@claim("08_hybrid_3d")
def the_mesh_by_hand_is_the_kits(nb: dict) -> str | None:
    """Section 1: slicing one (pp, dp, tp) tensor of ranks gives the kit's groups on every axis."""
    lines = [line for line in tagged_text(nb, "mesh-by-hand").splitlines() if line.strip()]
    return None if len(lines) == 3 and all(line.endswith("the kit's groups: True") for line in lines) else \
        f"the slices differ: {lines}"
