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

