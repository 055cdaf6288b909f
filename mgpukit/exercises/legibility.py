"""Lessons a learner can read (issue 35): the rules every notebook's cells follow.

The Ultra-Scale Playbook writes the idea on the page and lets a figure carry the numbers;
nanoGPT and picotron show a mechanism in a few visible lines. A notebook cell that prints a
paragraph, asserts its own claims or runs thirty lines hides the idea instead. So:

- **a code cell is short**: at most `MAX_CODE_LINES` lines that are neither blank nor comments
  (a justified exception is listed in `LONG_CELLS`, by cell id, with its reason);
- **no `assert` in a teaching cell**: a claim a cell used to assert is checked by a test that
  reads the executed notebook (`notebooks/conftest.py`), so the reader sees the number and CI
  still fails when the sentence stops being true;
- **no sentence built by conditionals**: a conditional expression that picks between two strings
  (``"fits" if x else "does not fit"``) writes prose in code — the prose goes in markdown;
- **printed output is a few lines or a table**: at most `MAX_PRINTED_CHARS` characters and
  `MAX_PRINTED_LINES` lines of text per cell (figures and widgets are not counted).

`PENDING` is the one place that lists the notebooks not yet rewritten to these rules: the tests
and the nbmake hook skip them (xfail). Delete a notebook's line to switch its checks on.
"""
from __future__ import annotations

import ast
import re

from mgpukit.exercises.leaks import output_text

MAX_CODE_LINES = 12
MAX_PRINTED_CHARS = 1200
MAX_PRINTED_LINES = 16

# ---- the notebooks whose checks are not switched on yet (notebook stem -> who rewrites it)
PENDING: dict[str, str] = {
}

# ---- justified long cells: notebook stem -> {cell id: why it may be longer}
LONG_CELLS: dict[str, dict[str, str]] = {
    "01_data_parallel": {"buckethook": "the bucket hook written out whole (issue 35: the mechanism in plain sight)"},
    "02_communication": {"ringloop": "the ring all-reduce written out whole, both phases in one function "
                                     "(issue 35: the mechanism in plain sight)"},
}

_MAGIC = re.compile(r"^\s*[%!]")


def code_lines(src: str) -> int:
    """Lines of `src` that are neither blank nor comments (what a reader has to read)."""
    return sum(1 for line in src.splitlines() if line.strip() and not line.strip().startswith("#"))


def _tree(src: str) -> ast.AST | None:
    try:  # IPython magics (`%time`, `!ls`) are not Python: drop them before parsing
        return ast.parse("\n".join("" if _MAGIC.match(line) else line for line in src.splitlines()))
    except SyntaxError:
        return None


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def prose_by_conditional(src: str) -> list[int]:
    """Line numbers (1-based) of conditional expressions that choose between two strings."""
    tree = _tree(src)
    return sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.IfExp)
                   and (_is_text(n.body) or _is_text(n.orelse))}) if tree else []


def asserts(src: str) -> list[int]:
    """Line numbers (1-based) of `assert` statements in a cell."""
    tree = _tree(src)
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)) if tree else []


def printed(cell: dict) -> str:
    """The text a code cell's outputs show (stdout, stderr, rich text) — not figures or widgets."""
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if "application/vnd.plotly.v1+json" in data or "application/vnd.jupyter.widget-view+json" in data:
            continue
        out.append(output_text(o))
    return "".join(out)


def source_problems(stem: str, nb: dict) -> list[str]:
    """What breaks the rules in the committed cells of notebook `stem` (sources only)."""
    problems = []
    allowed = LONG_CELLS.get(stem, {})
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src, cid = "".join(cell["source"]), cell.get("id", "")
        n = code_lines(src)
        if n > MAX_CODE_LINES and cid not in allowed:
            problems.append(f"cell {i} ({cid}): {n} code lines (at most {MAX_CODE_LINES}; or list it in "
                            "legibility.LONG_CELLS with the reason)")
        for line in asserts(src):
            problems.append(f"cell {i} ({cid}) line {line}: `assert` in a teaching cell (check the claim in "
                            "the notebook's claims test instead)")
        for line in prose_by_conditional(src):
            problems.append(f"cell {i} ({cid}) line {line}: a sentence picked by a conditional (write the "
                            "prose in markdown)")
    return problems


def output_problems(stem: str, nb: dict) -> list[str]:
    """What an executed notebook prints beyond a few lines or a table, cell by cell."""
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        text = printed(cell)
        lines = len(text.splitlines())
        if len(text) > MAX_PRINTED_CHARS or lines > MAX_PRINTED_LINES:
            problems.append(f"cell {i} ({cell.get('id', '')}): prints {len(text):,} characters in {lines} lines "
                            f"(at most {MAX_PRINTED_CHARS:,} / {MAX_PRINTED_LINES}: a few lines or a table)")
    return problems
