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


_UNITS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def _secs(cell: str) -> float:
    """'1.42 ms' -> 0.00142 (a time as `plots.format_time` prints it)."""
    value, unit = cell.split()[:2]
    return float(value.replace(",", "")) * _UNITS[unit]


def _x(cell: str) -> float:
    """'1.65×' -> 1.65."""
    return float(cell.rstrip("×").replace(",", ""))


def _rows(nb: dict, name: str, first: str) -> dict[str, list[str]]:
    """The rows of a tagged table keyed by their first cell, header and other lines left out."""
    return {r[0]: r for r in table(nb, name) if len(r) > 1 and r[0] != first}


@claim("01_data_parallel")
def the_profile_states_q1s_link(nb: dict) -> str | None:
    """Section 1: the NVLink figures exercise Q1 states are the profile's."""
    text = tagged_text(nb, "nvlink-figures")
    return None if "α = 2 µs per message, β = 370 GB/s" in text else f"the link reads {text.splitlines()[0]!r}"


@claim("01_data_parallel")
def three_strategies_exact_and_bucketed_overlaps(nb: dict) -> str | None:
    """Section 2: all three at parity; naive sends 69 all-reduces, bucketed about a dozen and a shorter step."""
    rows = _rows(nb, "strategies", "strategy")
    wrong = [n for n, r in rows.items() if r[1] != "True"]
    naive, bucketed = rows["dp-naive"], rows["dp-bucketed"]
    if len(rows) != 3 or wrong:
        return f"parity fails for {wrong or 'a missing row'}"
    if int(naive[3]) != 69 or not 8 <= int(bucketed[3]) <= 16:
        return f"all-reduces per step: naive {naive[3]}, bucketed {bucketed[3]}"
    return None if _secs(bucketed[4]) < _secs(naive[4]) else "bucketed's step is not shorter than naive's"


@claim("01_data_parallel")
def small_buckets_pay_latency_big_ones_bytes(nb: dict) -> str | None:
    """Section 2: a 0.05-MiB bucket's latency is > 10× its bytes' time; a 25-MiB bucket's bytes outweigh it."""
    rows = _rows(nb, "bucket-latency", "one bucket on 2 H100s")
    small, large = rows["0.05 MiB"], rows["25 MiB"]
    if not _secs(small[1]) > 10 * _secs(small[2]):
        return f"0.05 MiB: latency {small[1]} is not > 10× bytes {small[2]}"
    return None if _secs(large[2]) > _secs(large[1]) else f"25 MiB: bytes {large[2]} do not outweigh {large[1]}"


@claim("01_data_parallel")
def weak_leads_strong_and_they_meet_at_8(nb: dict) -> str | None:
    """Section 3: at 8 GPUs strong and weak are one run; weak's speedup leads at every n > 1; one GPU takes
    less than 8× the time for 8× the sequences; the cost model (same op model) within 2 % of the emulator."""
    rows = [r for r in table(nb, "strong-weak")[1:]]
    one, eight = rows[0], rows[-1]
    wrong = []
    if not (eight[1] == eight[5] and eight[2] == eight[6]):
        wrong.append("the 8-GPU rows are not one run")
    if not all(_x(r[7]) > _x(r[3]) for r in rows[1:]):
        wrong.append("weak does not lead strong at every n > 1")
    if not _secs(one[2]) < 8 * _secs(one[6]):
        wrong.append("64 sequences take 8× the time of 8 on one GPU")
    if any(abs(_x(r[4]) / _x(r[3]) - 1) > 0.02 for r in rows[1:]):
        wrong.append("the cost model drifted from the emulator")
    return "; ".join(wrong) or None


@claim("01_data_parallel")
def the_fixed_part_explains_strong_scaling(nb: dict) -> str | None:
    """Section 3: Amdahl's law from the fixed part of one GPU's step gives each emulated strong speedup within 5 %."""
    rows = [r for r in table(nb, "amdahl") if r[0].isdigit()]
    off = [r[0] for r in rows if abs(_x(r[1]) / _x(r[2]) - 1) > 0.05]
    return None if len(rows) == 3 and not off else f"Amdahl misses the emulated speedup at {off or 'a missing row'} GPUs"


@claim("01_data_parallel")
def gpt2s_emulated_steps_on_the_closed_form(nb: dict) -> str | None:
    """Section 3: GPT-2's emulated steps land within 10 % of the closed form (the same op model)."""
    rows = [r for r in table(nb, "gpt2-emulated") if r[0].isdigit()]
    off = [r[0] for r in rows if abs(_secs(r[1]) / _secs(r[2]) - 1) > 0.1]
    return None if len(rows) == 2 and not off else f"emulated ≠ predicted at {off or 'a missing row'} GPUs"


@claim("01_data_parallel")
def gpt2_on_one_h100_as_measured_and_kernel_bound(nb: dict) -> str | None:
    """Section 3: one emulated H100 within 0.8-1.25× the kit's measured step; its kernels outlast the host."""
    rows = [r for r in table(nb, "gpt2-measured")[1:]]
    kit, emu, kernels, host = (_secs(rows[i][1]) for i in (0, 2, 3, 4))
    if not 0.8 < emu / kit < 1.25:
        return f"emulated / measured = {emu / kit:.2f}"
    return None if kernels > host else "the host's launches outlast the kernels"


@claim("01_data_parallel")
def gpt2_hides_its_all_reduce_tiny_pays_latency(nb: dict) -> str | None:
    """Section 3: gpt-tiny's one bucket is mostly latency (2·7·α of its all-reduce); GPT-2's 14 buckets leave
    under 10 % of its all-reduce exposed; GPT-2's kernels outlast the host's launches by under 1.5×."""
    rows = _rows(nb, "tiny-vs-gpt2", "at 8 GPUs (predicted)")
    tiny, gpt2 = rows["gpt-tiny, kernels only"], rows["GPT-2 124M, with launches"]
    wrong = []
    if not (int(tiny[2]) == 1 and 2 * 7 * 2e-6 > 0.5 * _secs(tiny[3])):
        wrong.append(f"gpt-tiny: {tiny[2]} buckets, all-reduce {tiny[3]}")
    if not (int(gpt2[2]) == 14 and _secs(gpt2[4]) < 0.1 * _secs(gpt2[3])):
        wrong.append(f"GPT-2: {gpt2[2]} buckets, exposed {gpt2[4]} of {gpt2[3]}")
    if not 1 < _secs(gpt2[6]) / _secs(gpt2[7]) < 1.5:
        wrong.append(f"GPT-2's kernels {gpt2[6]} vs host {gpt2[7]}")
    return "; ".join(wrong) or None


@claim("01_data_parallel")
def dp_is_compute_bound_above_d_star(nb: dict) -> str | None:
    """Section 3's rule, checked on the emulator: D* = 2(n−1)/n · F/β lies between the two runs; below it the
    all-reduce outlasts backward and DDP waits for at least half the difference; above it backward outlasts
    the all-reduce and DDP waits for under a third of it (about its last bucket)."""
    text = tagged_text(nb, "dp-rule")
    d_star = float(re.search(r"F/β = ([\d,]+) tokens", text).group(1).replace(",", ""))
    rows = [r for r in table(nb, "dp-rule") if r[0].replace(",", "").isdigit()]
    (d_lo, *lo), (d_hi, *hi) = [(number(r[0]), *(_secs(c) for c in r[1:4])) for r in rows]
    wrong = []
    if not d_lo < d_star < d_hi:
        wrong.append(f"D* = {d_star:.0f} is not between {d_lo:.0f} and {d_hi:.0f}")
    bwd, ar, wait = lo
    if not (ar > bwd and wait >= 0.5 * (ar - bwd)):
        wrong.append(f"below D*: backward {bwd}, all-reduce {ar}, wait {wait}")
    bwd, ar, wait = hi
    if not (bwd > ar and wait < ar / 3):
        wrong.append(f"above D*: backward {bwd}, all-reduce {ar}, wait {wait}")
    return "; ".join(wrong) or None


@claim("01_data_parallel")
def the_linear_rule_buys_progress(nb: dict) -> str | None:
    """Section 5: unscaled ×4 ends where ×1 ends (±25 %); the linear rule ends below 0.75× that; warmup at
    k = 4 changes the final loss by under 25 %."""
    one, same, linear, ramp = (number(r[2]) for r in table(nb, "lr-rule")[1:5])
    if not (abs(same / one - 1) < 0.25 and linear < 0.75 * same and abs(ramp / linear - 1) < 0.25):
        return f"final losses {one}, {same}, {linear}, {ramp}"
    return None


@claim("01_data_parallel")
def warmup_prevents_adams_early_blow_up(nb: dict) -> str | None:
    """Section 5: without warmup AdamW's loss jumps above 3× its start within 3 steps; with the 30-step ramp
    it never rises above its start; the warmed-up run ends below half the other's final loss."""
    rows = _rows(nb, "warmup", "AdamW, lr 0.024 = 0.0015 × 16")
    cold, warm = rows["0 warmup steps"], rows["30 warmup steps"]
    wrong = []
    if not (number(cold[2]) > 3 * number(cold[1]) and int(cold[3]) <= 3):
        wrong.append(f"no blow-up without warmup: worst {cold[2]} at step {cold[3]}")
    if not (number(warm[2]) <= number(warm[1]) and int(warm[3]) == 0):
        wrong.append(f"the ramped run rises to {warm[2]} at step {warm[3]}")
    if not number(warm[4]) < 0.5 * number(cold[4]):
        wrong.append(f"final {warm[4]} vs {cold[4]}")
    return "; ".join(wrong) or None


@claim("01_data_parallel")
def the_emulated_straggler_is_3x(nb: dict) -> str | None:
    """Section 6: a factor-3 straggler's forward and backward take 3.00× the other rank's."""
    return None if abs(_after(tagged_text(nb, "straggler-emu"), "take") - 3) < 0.01 else "not 3.00×"


@claim("01_data_parallel")
def the_bucket_count_hardly_shows(nb: dict) -> str | None:
    """Q4's run: at 0.2 and 0.05 MiB what is left after backward is under 1 % of the step; steps within 2 %."""
    rows = _rows(nb, "bucket-sizes", "bucket_mb")
    steps = [_secs(r[2]) for r in rows.values()]
    if any(_secs(r[3]) > 0.01 * _secs(r[2]) for r in rows.values()):
        return "over 1 % of a step is left after backward"
    return None if len(steps) == 2 and max(steps) / min(steps) < 1.02 else f"steps {steps}"


@claim("01_data_parallel")
def ddps_copies_are_the_extra_backward(nb: dict) -> str | None:
    """Appendix: DDP's two copies per gradient tensor are the extra backward time (2 %); the steps on 2 to 8
    GPUs agree within 2 %; DDP's wait is under 1 % of the step; 8 GPUs give fewer tokens/s than 1."""
    lines = tagged_text(nb, "ddp-copies").splitlines()
    extra, copies = (_secs(re.split(r"\s{2,}", line.strip())[1]) for line in lines[1:3])
    spread, wait = (number(re.split(r"\s{2,}", line.strip())[1]) for line in lines[3:5])
    eight = tagged_text(nb, "ddp-slower").strip().splitlines()[-1].split()[-1]
    wrong = []
    if abs(copies / extra - 1) > 0.02:
        wrong.append(f"copies {copies} vs extra {extra}")
    if spread > 0.02 or wait > 0.01:
        wrong.append(f"steps differ by {spread}, wait {wait}")
    if not _x(eight) < 1:
        wrong.append(f"8 GPUs give {eight} the tokens/s of 1")
    return "; ".join(wrong) or None


@claim("01_data_parallel")
def the_tiny_gpt_is_launch_bound(nb: dict) -> str | None:
    """Appendix: the host is busy > 90 % of the step; kernels < graphed < half the eager step; the
    kernels-only step is shorter than the kernels with their floor."""
    rows = _rows(nb, "launch-bound", "the 1-H100 step (emulated)")
    t = {k: _secs(r[1]) for k, r in rows.items()}
    step, kernels = t["with eager launches"], t["kernels busy on the GPU's stream"]
    graphed, bare = t["one CUDA-graph launch per step (estimate)"], t["kernels-only profile: no launches, no floor"]
    busy = _after(tagged_text(nb, "launch-bound"), "host busy issuing kernels:")
    if not (busy > 0.9 and kernels < graphed < step / 2 and bare < kernels):
        return f"busy {busy}, step {step}, kernels {kernels}, graphed {graphed}, kernels only {bare}"
    return None


@claim("01_data_parallel")
def real_gpus_as_the_markdown_reads_them(nb: dict) -> str | None:
    """Appendix: the H200 row is the fitted one (ratio 1 ± 2 %); the H100's host was faster than the profile
    per op, and both its emulated steps are longer than measured; the kit's step is longer than the plain
    loop's; both GPUs' plain steps are over 2× the emulated kernels' time."""
    rows = table(nb, "real-gpus")[1:]
    h200, h100, kit = rows
    launch = _rows(nb, "launch-bound", "the 1-H100 step (emulated)")
    kernels = _secs(launch["kernels busy on the GPU's stream"][1])
    measured, profile = (list(map(float, part.split(" / "))) for part in h100[4].split(" · "))
    wrong = []
    if abs(_x(h200[3]) - 1) > 0.02:
        wrong.append(f"the H200 row reads {h200[3]}")
    if not (all(m < p for m, p in zip(measured, profile)) and _x(h100[3]) > 1 and _x(kit[3]) > 1):
        wrong.append(f"H100: host {measured} vs {profile}, ratios {h100[3]}, {kit[3]}")
    if not _secs(kit[1]) > _secs(h100[1]):
        wrong.append("the kit's step is not longer than the plain loop's")
    if not min(_secs(h200[1]), _secs(h100[1])) > 2 * kernels:
        wrong.append("a real step is not over 2× the kernels")
    return "; ".join(wrong) or None
