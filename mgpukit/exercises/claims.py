"""What a notebook's cells claim, checked on the executed notebook (issue 35).

A teaching cell shows a number; the markdown beside it says what the number means ("the
simulated bubble is the closed form (p − 1)/(m + p − 1)"). That sentence used to be an `assert`
in the cell, which a reader had to read past. Here it is a test instead: the cell carries a tag,
`claim:<name>` in its metadata, and a function registered for its notebook reads that cell's
printed output (a table) and returns what is wrong, or None. `notebooks/conftest.py` runs every
notebook's claims on the notebook nbmake has just executed, so CI fails when the sentence stops
being true, and the reader sees only the table.

A claim function gets `table(nb, name)`: the rows of the tagged cell's printed table, split on
runs of two or more spaces, header first. Each notebook's claims live beside its answers
(`claims_00_04.py`; notebooks 05-10 get a module of their own the same way), registered on
import of `mgpukit.exercises`.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from mgpukit.exercises.legibility import printed

Claim = Callable[[dict], "str | None"]
CLAIMS: dict[str, list[Claim]] = {}


def claim(stem: str):
    """Register the decorated function as one of notebook `stem`'s claims."""
    def add(fn: Claim) -> Claim:
        CLAIMS.setdefault(stem, []).append(fn)
        return fn
    return add


def tagged_text(nb: dict, name: str) -> str:
    """The printed text of the code cell tagged `claim:<name>` (KeyError if no cell is)."""
    for cell in nb["cells"]:
        if f"claim:{name}" in cell.get("metadata", {}).get("tags", []):
            return printed(cell)
    raise KeyError(f"no cell is tagged claim:{name}")


def table(nb: dict, name: str) -> list[list[str]]:
    """The rows of the table printed by the cell tagged `claim:<name>` (header row first)."""
    return [re.split(r"\s{2,}", line.strip()) for line in tagged_text(nb, name).splitlines() if line.strip()]


def number(cell: str) -> float:
    """'11.1 %' -> 0.111, '1,234' -> 1234.0, '0.75' -> 0.75."""
    s = cell.replace(",", "").replace("−", "-").strip()
    if s.endswith("%"):
        return float(s[:-1]) / 100
    return float(s.split()[0])


def claim_problems(stem: str, nb: dict) -> list[str]:
    """What notebook `stem`'s registered claims find wrong in its executed outputs."""
    problems = []
    for fn in CLAIMS.get(stem, []):
        try:
            wrong = fn(nb)
        except (KeyError, ValueError, IndexError) as e:  # the table is not what the claim reads
            wrong = f"cannot read its table: {e}"
        if wrong:
            problems.append(f"claim {fn.__name__}: {wrong}")
    return problems
