"""Notebooks import the library only through its notebook-facing packages.

Method: parse every code cell of `notebooks/*.ipynb` with `ast` (nothing runs) and collect each
`import` / `from … import` of `mgpukit`. Allowed: `mgpukit` itself, the lessons facade
(`mgpukit.lessons` and its modules), the answer checker (`mgpukit.exercises`), and the plotting
and widget packages (`mgpukit.plots`, `mgpukit.widgets`). Anything deeper (`mgpukit.costmodel`,
`mgpukit.strategies`, `mgpukit.runtime`, …) belongs behind the facade, so those layers can move
without a notebook noticing. Other libraries (torch, accelerate, plotly, the standard library)
are not restricted: notebooks 00 and 02 call torch.distributed on purpose.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
ALLOWED = ("mgpukit.lessons", "mgpukit.exercises", "mgpukit.plots", "mgpukit.widgets")


def _code(cell_source: str) -> str:
    # IPython magics and shell lines are not Python; blank them so `ast` can read the rest.
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell_source.splitlines())


def mgpukit_imports(notebook: Path) -> list[str]:
    """The module each mgpukit import of `notebook` names (`from mgpukit.x import y` → `mgpukit.x`)."""
    out = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(_code("".join(cell["source"])))):
            if isinstance(node, ast.Import):
                out += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                out.append(node.module)
    return [m for m in out if m.split(".")[0] == "mgpukit"]


def _allowed(module: str) -> bool:
    return module == "mgpukit" or any(module == a or module.startswith(a + ".") for a in ALLOWED)


def test_the_check_sees_a_deep_import(tmp_path):
    """The test of the test: a cell that reaches into the cost model is caught, the facade is not."""
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["%matplotlib inline\n", "import mgpukit\n",
                                         "from mgpukit.lessons import RunConfig\n"]},
        {"cell_type": "markdown", "source": ["from mgpukit.runtime import x"]},
        {"cell_type": "code", "source": ["if True:\n", "    from mgpukit.costmodel.comm import bus_factor\n"]},
    ]}))
    found = mgpukit_imports(nb)
    assert found == ["mgpukit", "mgpukit.lessons", "mgpukit.costmodel.comm"]
    assert [m for m in found if not _allowed(m)] == ["mgpukit.costmodel.comm"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_the_facade(notebook):
    deep = sorted({m for m in mgpukit_imports(notebook) if not _allowed(m)})
    assert not deep, (f"{notebook.name} imports {deep}: re-export what it needs from "
                      "mgpukit/lessons/__init__.py and import it from mgpukit.lessons")
