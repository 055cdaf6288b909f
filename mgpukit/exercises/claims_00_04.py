"""The claims notebooks 00-04 make beside a table, checked on the executed notebook (`claims`).

Each function reads the table of the cell tagged `claim:<name>` and returns what is wrong, or None.
"""
from __future__ import annotations

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
