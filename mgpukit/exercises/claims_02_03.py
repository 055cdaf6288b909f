"""The claims notebooks 02 and 03 make beside a table, checked on the executed notebook (`claims`).

Each function reads the printed output of the cell tagged `claim:<name>` and returns what is
wrong, or None. Where a claim says "the emulator lands on the formula", the formula is
recomputed here from `mgpukit.costmodel.comm` and the profile, so the notebook's cell shows only
the emulated number. (02's first claim, the ring by hand, sits in `claims_00_04`.)
"""
from __future__ import annotations

import re

import torch

from mgpukit.costmodel import comm
from mgpukit.costmodel.hardware import load_profile
from mgpukit.exercises.claims import claim, number, table, tagged_text
from mgpukit.strategies.compression.topk import TopK

_SECONDS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def _time(cell: str) -> float:
    """'7.57 ms' -> 0.00757."""
    value, unit = cell.split()
    return float(value) * _SECONDS[unit]


def _rows(nb: dict, name: str) -> list[list[str]]:
    """The whitespace-split data rows (header left out) of the cell tagged `claim:<name>`."""
    return [line.split() for line in tagged_text(nb, name).splitlines()[1:] if line.strip()]


# ---- 02 · communication
@claim("02_communication")
def every_all_reduce_equals_the_backend(nb: dict) -> str | None:
    """Section 3: every all-reduce equals `dist.all_reduce` exactly; ring and halving-doubling send
    2(n−1)/n · B give or take one element per message (1001 does not divide by n); naive's rank 0
    sends (n−1)·B and the others B."""
    rows, wrong = _rows(nb, "checked"), []
    for n, algo, same, rank0, rank1, formula in rows:
        n, b = int(n), 4 * 1001
        r0, r1, f = (float(x.replace(",", "")) for x in (rank0, rank1, formula))
        if same != "True":
            wrong.append(f"{algo} on {n} ranks differs from the backend")
        elif algo == "naive" and (r0, r1) != ((n - 1) * b, b):
            wrong.append(f"naive on {n} ranks sends {r0:,.0f} / {r1:,.0f}, not (n−1)·B / B")
        elif algo != "naive" and max(abs(r0 - f), abs(r1 - f)) > 4 * 2 * (n - 1):
            wrong.append(f"{algo} on {n} ranks sends {r0:,.0f} / {r1:,.0f}, not 2(n−1)/n·B = {f:,.0f}")
    return "; ".join(wrong) if wrong else (None if len(rows) == 8 else f"{len(rows)} rows, not 8")


@claim("02_communication")
def the_exercises_link_is_h100_nvlink(nb: dict) -> str | None:
    """Section 5 prints h100-nvlink's NVLink as exercises 8.2 and 8.4 state it: α = 2 µs, β = 370 GB/s."""
    link = load_profile("h100-nvlink").intra_node
    text = tagged_text(nb, "emulated-link")
    if (link.alpha, link.beta) != (2e-6, 370e9):
        return f"h100-nvlink's NVLink is α = {link.alpha}, β = {link.beta}: exercises 8.2 and 8.4 say 2 µs, 370 GB/s"
    return None if "α = 2 µs, β = 370 GB/s" in text else f"the link line reads {text.strip()!r}"


@claim("02_communication")
def the_emulated_algorithms_land_on_their_formulas(nb: dict) -> str | None:
    """Section 5's table: the ring (and the backend, charged as the ring) sits on the cost model's
    ring within 2 % at both ends; at 1 KiB halving-doubling and naive beat the ring; at 16 MiB naive
    is under half the ring and on the emulator's (1 + (n−1)) message times within 2 %."""
    link, n = load_profile("h100-nvlink").intra_node, 4
    rows = {r[0]: r for r in _rows(nb, "emulated")[:4]}
    bw = {k: (float(r[2]) * 1e9, float(r[3]) * 1e9) for k, r in rows.items()}
    ring_pred = [comm.bus_factor("all_reduce", n) * s / comm.allreduce_time(s, n, link) for s in (2**10, 2**24)]
    naive_pred = comm.bus_factor("all_reduce", n) * 2**24 / ((1 + n - 1) * (link.alpha + 2**24 / link.beta))
    wrong = []
    for name in ("backend", "ring"):
        if any(abs(b / p - 1) > 0.02 for b, p in zip(bw[name], ring_pred)):
            wrong.append(f"{name} {bw[name]} is off the ring's prediction {ring_pred}")
    if not (bw["halv-doub"][0] > bw["ring"][0] and bw["naive"][0] > bw["ring"][0]):
        wrong.append("at 1 KiB the ring is not the slowest")
    if not bw["naive"][1] < 0.5 * bw["ring"][1]:
        wrong.append("at 16 MiB naive is not under half the ring")
    if abs(bw["naive"][1] / naive_pred - 1) > 0.02:
        wrong.append(f"naive at 16 MiB {bw['naive'][1]:.3g} is off the emulator's formula {naive_pred:.3g}")
    return "; ".join(wrong) or None


@claim("02_communication")
def the_ring_is_bandwidth_bound_above_n_alpha_beta(nb: dict) -> str | None:
    """Section 5's rule: the emulated ring's busbw is above β/2 exactly where B > B* = nαβ."""
    link = load_profile("h100-nvlink").intra_node
    rows = _rows(nb, "rule")[1:]   # after the B* line and the header
    b_star = 4 * link.alpha * link.beta
    wrong = [r[0] for r in rows if (float(r[2]) > 0.5) != (float(r[0].replace(",", "")) > b_star)
             or r[1] != str(float(r[0].replace(",", "")) > b_star)]
    return None if len(rows) == 5 and not wrong else f"busbw/β against β/2 disagrees with B > nαβ at {wrong or rows}"


@claim("02_communication")
def staleness_orders_the_losses(nb: dict) -> str | None:
    """Section 6: staleness 0 ends below ps-sync, which ends below staleness 1; staleness 1 turns
    back up after its lowest loss; staleness 0 starts below single, staleness 1 starts on it."""
    rows = {r[0]: [number(c) for c in r[1:]] for r in table(nb, "ps-losses")[1:]}
    single, sync, s1, s0 = (rows[k] for k in ("single", "ps-sync", "ps-async", "ps-async (staleness 0)"))
    wrong = []
    if not s0[-1] < sync[-1] < s1[-1]:
        wrong.append(f"final losses {s0[-1]}, {sync[-1]}, {s1[-1]} are not staleness 0 < sync < staleness 1")
    if not s1[-1] > s1[1]:
        wrong.append("staleness 1 did not turn back up")
    if not (s0[0] < single[0] and abs(s1[0] - single[0]) < 1e-3):
        wrong.append(f"step 0: staleness 0 {s0[0]}, staleness 1 {s1[0]}, single {single[0]}")
    return "; ".join(wrong) or None


@claim("02_communication")
def the_server_sends_n_over_2_the_ring(nb: dict) -> str | None:
    """Section 6: counted at n = 3, the server sends n/2 = 1.5× what a ring rank sends per step."""
    line = next(line for line in tagged_text(nb, "ps-bytes").splitlines() if "counted" in line)
    ratio = float(re.search(r"([\d.]+)×", line).group(1))
    return None if abs(ratio - 1.5) < 0.01 else f"the counted ratio is {ratio}, not n/2 = 1.5"


@claim("02_communication")
def the_async_round_runs_twice_the_updates_and_is_shorter(nb: dict) -> str | None:
    """Section 6, emulated: the async server runs n − 1 = 2× sync's optimizer steps per round,
    and its round is shorter (the markdown says so)."""
    rows = {r[0]: r for r in table(nb, "ps-round")[1:]}
    sync, asyn = rows["ps-sync"], rows["ps-async"]
    if int(asyn[4]) != 2 * int(sync[4]):
        return f"the async server ran {asyn[4]} updates, not twice sync's {sync[4]}"
    return None if _time(asyn[1]) < _time(sync[1]) else f"the async round {asyn[1]} is not shorter than {sync[1]}"


@claim("02_communication")
def one_gpu_per_node_costs_the_link_ratio(nb: dict) -> str | None:
    """Section 7: at 1 GiB, one GPU per node is slower than one full node by the two links' β
    ratio (within 10 %)."""
    line = tagged_text(nb, "nodes").splitlines()[-1]
    slower = float(re.search(r"is ([\d.]+)× slower", line).group(1))
    ratio = float(re.search(r"InfiniBand β = ([\d.]+)\)", line).group(1))
    return None if abs(slower / ratio - 1) < 0.1 else f"{slower}× slower against a β ratio of {ratio}"


# ---- 03 · gradient compression
@claim("03_gradient_compression")
def every_method_passes_its_stated_check(nb: dict) -> str | None:
    """Section 3: each method passes the check section 3 states for it (elementwise or final loss)."""
    rows = table(nb, "parity")[1:]
    failed = [r[0] for r in rows if r[2] != "True"]
    return None if len(rows) == 6 and not failed else f"failed their check: {failed or rows}"


@claim("03_gradient_compression")
def measured_bytes_are_the_expected_factor(nb: dict) -> str | None:
    """Section 3: every method's measured byte factor is its formula's within 1 %."""
    off = [r[0] for r in table(nb, "bytes")[1:] if abs(number(r[3]) / number(r[2]) - 1) > 0.01]
    return f"measured × off the formula for {off}" if off else None


@claim("03_gradient_compression")
def recoders_stay_on_fp32_and_top_k_falls_behind(nb: dict) -> str | None:
    """Section 3: fp16 and int8 stay within 0.5 % of fp32 early and late; top-k's gap grows."""
    rows = {r[0]: [number(c) for c in r[1:3]] for r in table(nb, "gaps")[1:]}
    wrong = [n for n in ("dp-fp16", "dp-int8") if max(abs(g) for g in rows[n]) >= 0.005]
    early, late = rows["dp-topk"]
    if not late > early > 0:
        wrong.append(f"top-k's gap {early:+.2%} → {late:+.2%} does not grow")
    return "; ".join(wrong) or None


@claim("03_gradient_compression")
def error_feedback_keeps_top_k_closer(nb: dict) -> str | None:
    """Section 4: without error feedback top-k ends further above fp32 than with it."""
    gaps = [float(x) for x in re.findall(r"\(([\d.]+) % above\)", tagged_text(nb, "ef"))]
    return None if len(gaps) == 2 and gaps[1] > gaps[0] else f"gaps with / without error feedback: {gaps}"


@claim("03_gradient_compression")
def fewer_bytes_win_only_on_the_slow_link(nb: dict) -> str | None:
    """Section 5: on NVLink every method but PowerSGD takes fp32's step (within 5 %); PowerSGD is
    slower on both links; on 10 GbE the re-encoders win in the order of the bytes they save, each
    by far less than its byte factor (section 3's measured ×)."""
    rows = {r[0]: r for r in table(nb, "emulated-steps")[1:]}
    factor = {r[0]: number(r[3]) for r in table(nb, "bytes")[1:]}
    nv, eth = ({n: number(r[i]) for n, r in rows.items()} for i in (2, 4))
    recoders = sorted((n for n in rows if n != "dp-powersgd"), key=factor.get)   # fp32 first, top-k last
    wrong = [f"{n} on NVLink {g}×" for n, g in nv.items() if n != "dp-powersgd" and not 0.95 < g < 1.05]
    if not (nv["dp-powersgd"] < 1 and eth["dp-powersgd"] < 1):
        wrong.append("PowerSGD is not slower on both links")
    if [eth[n] for n in recoders] != sorted(eth[n] for n in recoders):
        wrong.append(f"10 GbE speed-ups {[eth[n] for n in recoders]} do not follow the bytes saved")
    wrong += [f"{n} wins {eth[n]}× of a {factor[n]}× byte factor" for n in recoders[1:] if eth[n] >= factor[n]]
    return "; ".join(wrong) or None


@claim("03_gradient_compression")
def the_rule_says_who_pays_on_10_gbe(nb: dict) -> str | None:
    """Section 5's rule: (1 − r)·2(n−1)/n·4Ψ / β > T_own + Δα says which methods pay on the 10 GbE
    link; the emulated 10 GbE runs (which the rule did not use) agree, row by row, and both
    verdicts occur."""
    rows = table(nb, "rule")[1:]
    pays = {r[0]: r[4] == "True" for r in rows}
    wrong = [r[0] for r in rows if pays[r[0]] != (number(r[5]) > 1)
             or (r[3] != "inf" and pays[r[0]] != (1.1 < number(r[3])))]
    if len(set(pays.values())) != 2:
        return f"the rule gives one verdict for every method: {pays}"
    return f"the rule and the emulator disagree for {wrong}" if wrong else None


@claim("03_gradient_compression")
def gpt2s_rows_land_where_the_markdown_says(nb: dict) -> str | None:
    """Section 5, GPT-2: ddp is DDP's closed form (within 5 %), not compute + exchange; fp16 is
    compute + exchange (within 2 %); PowerSGD's own work makes it slower than that sum."""
    text = tagged_text(nb, "gpt2")
    rows = {r[0]: r for r in table(nb, "gpt2")[1:4]}
    closed = _time(re.search(r"closed form ([\d.]+ \S+):", text).group(1))
    wrong = []
    if abs(_time(rows["ddp"][1]) / closed - 1) > 0.05:
        wrong.append(f"ddp {rows['ddp'][1]} is off DDP's closed form")
    if abs(_time(rows["dp-fp16"][1]) / _time(rows["dp-fp16"][3]) - 1) > 0.02:
        wrong.append(f"fp16 {rows['dp-fp16'][1]} is off compute + exchange {rows['dp-fp16'][3]}")
    if not _time(rows["dp-powersgd"][4]) > 0:
        wrong.append("PowerSGD is not slower than compute + exchange")
    return "; ".join(wrong) or None


@claim("03_gradient_compression")
def gpt2_turns_powersgd_around(nb: dict) -> str | None:
    """Section 5: PowerSGD is faster than fp32 for GPT-2 124M on 10 GbE and slower for gpt-tiny."""
    rows = {r[0]: r for r in table(nb, "scale")[1:]}
    big, tiny = number(rows["gpt2-124m"][3]), number(rows["gpt-tiny"][3])
    return None if big > 1 > tiny else f"PowerSGD × is {big} for GPT-2 and {tiny} for gpt-tiny"


@claim("03_gradient_compression")
def the_residual_by_hand_is_the_kits_top_k(nb: dict) -> str | None:
    """Section 4: the eight-number loop sends, step by step, what the kit's `TopK` (k = 2 of 8,
    error feedback on) sends, and seven of the eight coordinates go out within 10 steps."""
    text = tagged_text(nb, "ef-by-hand")
    shown = [sorted(int(x) for x in re.findall(r"\d+", m)) for m in re.findall(r"sent coordinates \[([\d, ]+)\]", text)]
    g, topk = torch.tensor([4.0, -3.1, 2.2, 1.3, -0.9, 0.7, 0.4, 0.2]), TopK(8, 0.25)
    kit = [sorted(topk.compress(g)[1].tolist()) for _ in range(10)]
    if shown != kit:
        return f"the loop sent {shown}, the kit's TopK {kit}"
    reached = len({i for step in shown for i in step})
    return None if reached == 7 else f"{reached} of 8 coordinates were sent, not 7"
