"""A list of formatted rows as a Markdown table: what a notebook shows with
`display(Markdown(...))` instead of printing aligned columns (issue 35: numbers in tables)."""
from __future__ import annotations


def markdown_table(header: list[str], rows: list[list]) -> str:
    """``header`` and ``rows`` (cells already formatted as text) as a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])
