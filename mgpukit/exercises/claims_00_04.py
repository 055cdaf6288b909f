"""The claims notebooks 00-04 make beside a table, checked on the executed notebook (`claims`).

Each function reads the table of the cell tagged `claim:<name>` and returns what is wrong, or None.
"""
from __future__ import annotations

import re

from mgpukit.exercises.claims import claim, number, table, tagged_text


# ---- 00 · start here
@claim("00_start_here")
def ddp_matches_single(nb: dict) -> str | None:
    """Section 4: DDP on 2 workers matches the single process at torch's fp32 tolerances."""
    text = tagged_text(nb, "parity")
    return None if "parity vs single: ok=True" in text else f"the parity line reads {text.strip()!r}"


@claim("00_start_here")
def bytes_and_memory_as_predicted(nb: dict) -> str | None:
    """Section 4's table: every predicted row equals the measured (counted) bytes, to the byte."""
    rows = [r for r in table(nb, "bytes-table")[1:] if r[1] != "not modelled"]
    wrong = [r[0] for r in rows if number(r[1]) != number(r[2])]
    if len(rows) != 4 or wrong:
        return f"predicted ≠ measured for {wrong or 'a missing row'}"
    return None


# ---- 04 · pipeline parallelism
_PCT = re.compile(r"([-\d.]+)\s?%")


def _after(text: str, label: str) -> float:
    """The number printed right after `label` in `text` ('bubble 60.3%' -> 0.603)."""
    m = re.search(re.escape(label) + r"\s*([-\d.,]+)\s?(%?)", text)
    if not m:
        raise ValueError(f"no {label!r} in {text[:120]!r}")
    value = float(m.group(1).replace(",", ""))
    return value / 100 if m.group(2) else value


@claim("04_pipeline_parallel")
def the_1f1b_loop_is_the_kits_table(nb: dict) -> str | None:
    """Section 2: the ten-line 1F1B loop gives every rank the order the executor runs."""
    text = tagged_text(nb, "loop")
    return None if "rank by rank: [True, True, True, True]" in text else f"the loop differs: {text.strip()[-80:]!r}"


@claim("04_pipeline_parallel")
def every_bubble_lands_on_its_closed_form(nb: dict) -> str | None:
    """Section 3: in unit time each schedule's emulated bubble is its closed form (ZB-H1's too),
    and the simulator fed the run's own costs agrees; ZB-H1's run measured F = 1, B = 1, W = 1 µs."""
    rows = table(nb, "bubbles")[1:6]
    off = [r[0] for r in rows if abs(number(r[1]) - number(r[2])) > 1e-3 or abs(number(r[1]) - number(r[3])) > 1e-3]
    costs = tagged_text(nb, "bubbles").splitlines()[-1]
    units = [float(x) for x in re.findall(r"(\d+\.\d+)", costs)]
    if len(rows) != 5 or off:
        return f"emulated ≠ closed form for {off or 'a missing row'}"
    return None if units == [1.0, 1.0, 1.0] else f"ZB-H1's costs are not unit: {costs!r}"


@claim("04_pipeline_parallel")
def the_rule_holds_at_its_bound(nb: dict) -> str | None:
    """Section 4: at m = 9(p − 1) = 27 the emulated 1F1B bubble is at most 10 %."""
    text = tagged_text(nb, "rule")
    return None if _after(text, "bubble") <= 0.1 + 1e-9 else f"m = 27 does not bring the bubble to 10 %: {text!r}"


@claim("04_pipeline_parallel")
def activations_held_as_the_markdown_says(nb: dict) -> str | None:
    """Section 5: 1F1B holds p − r; ZB-H1 the same peak on rank 0 and more on the last rank;
    interleaving holds more on rank 0 than 1F1B; a chunk's forward saves more than half a stage's."""
    lines = tagged_text(nb, "held").splitlines()
    one = [float(x) for x in re.search(r"1F1B: ([\d., ]+) ·", lines[0]).group(1).split(", ")]
    zb = [float(x) for x in re.search(r"ZB-H1: ([\d., ]+) \(", lines[0]).group(1).split(", ")]
    kib = [float(x) for x in re.findall(r"(\d+) KiB", lines[1])]   # 1F1B peak, interleaved peak, stage, chunk
    wrong = []
    if any(abs(a - b) > 0.05 for a, b in zip(one, (4, 3, 2, 1))):
        wrong.append(f"1F1B holds {one}, not 4, 3, 2, 1")
    if abs(zb[0] - one[0]) > 0.05 or zb[-1] <= one[-1]:
        wrong.append(f"ZB-H1 holds {zb}")
    if not (kib[1] > kib[0] and 2 * kib[3] > kib[2]):
        wrong.append(f"peaks / forwards read {kib}")
    return "; ".join(wrong) or None


@claim("04_pipeline_parallel")
def the_gpts_bubble_is_far_above_the_formula(nb: dict) -> str | None:
    """Section 6: gpt-tiny's emulated bubble is over 1.5× the formula, and its busiest host sets the step."""
    text, host = tagged_text(nb, "gpt"), tagged_text(nb, "host")
    bubble, formula = _after(text, "bubble"), _after(text, "(p-1)/(m+p-1) =")
    busy = [float(x) / 100 for x in _PCT.findall(host)]
    if bubble <= 1.5 * formula:
        return f"bubble {bubble:.3f} is not far above the formula's {formula:.3f}"
    return None if max(busy) >= 0.95 else f"no host is busy over 95 % of the step: {busy}"


@claim("04_pipeline_parallel")
def tiny_is_launch_bound_gpt2_kernel_bound(nb: dict) -> str | None:
    """Section 6: gpt-tiny's last stage is launch-bound, GPT-2's kernel-bound; the closed form
    lands on both emulated steps (same op model, within 3 %); GPT-2's head stage > 1.5× a middle one."""
    rows = table(nb, "bound")
    seconds = {"ms": 1e-3, "µs": 1e-6, "s": 1.0}

    def t(cell):
        value, unit = cell.split()
        return float(value) * seconds[unit]
    tiny, gpt2 = rows[1], rows[2]
    head = _after(rows[3][0] if len(rows[3]) == 1 else " ".join(rows[3]), "a middle stage's:")
    wrong = []
    if not t(tiny[2]) > t(tiny[1]):
        wrong.append("gpt-tiny is not launch-bound")
    if not t(gpt2[1]) > t(gpt2[2]):
        wrong.append("GPT-2 is not kernel-bound")
    if any(abs(number(r[3]) - 1) > 0.03 for r in (tiny, gpt2)):
        wrong.append("the closed form misses an emulated step by over 3 %")
    if head <= 1.5:
        wrong.append(f"the head stage is only {head}× a middle one")
    return "; ".join(wrong) or None


@claim("04_pipeline_parallel")
def the_cost_split_cures_the_imbalance(nb: dict) -> str | None:
    """Section 6's cure: the split by cost gives the head's stage fewer blocks, runs over 1.1×
    faster and shrinks the imbalance."""
    even, best = table(nb, "cure")[1:3]
    blocks = [int(x) for x in re.findall(r"\d+", best[0])]
    step = [_after(r[2], "") for r in (even, best)]
    if not (blocks[-1] < blocks[1] and sum(blocks) == 12):
        return f"the split {blocks} does not give the head's stage blocks away"
    if not step[0] > 1.1 * step[1]:
        return f"the cure's step {step[1]} is not 1.1× faster than {step[0]}"
    return None if number(best[3]) < number(even[3]) else "the imbalance did not shrink"


# ---- 02 · communication
@claim("02_communication")
def the_ring_by_hand_is_the_backends_all_reduce(nb: dict) -> str | None:
    """Section 2: the dozen-line ring gives every rank exactly what `dist.all_reduce` gives."""
    text = tagged_text(nb, "ring")
    return None if text.count("== dist.all_reduce: True") == 3 else f"the ring differs: {text.strip()[-120:]!r}"


# ---- 01 · data parallelism
@claim("01_data_parallel")
def the_bucket_hook_launches_last_layer_first(nb: dict) -> str | None:
    """Section 2: the written-out hook launches the last layer's bucket first and gives naive's gradients."""
    text = tagged_text(nb, "bucket-hook")
    want = "buckets launched in layer order [3, 2, 1, 0] · gradients equal to naive's: True"
    return None if text.count(want) == 2 else f"the hook's run reads {text.strip()!r}"
