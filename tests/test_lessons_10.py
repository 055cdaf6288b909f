"""Notebook 10's sentences, held true here instead of by conditionals and `assert`s in its cells
(issue 35), and the tables and figure it now shows through `lessons` helpers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mgpukit.lessons import syllabus
from mgpukit.lessons.claims import claims
from mgpukit.plots.spot import plot_savings

ROOT = Path(__file__).resolve().parents[1]


def test_mixed_pair_pays_but_barely():
    """10 §2: the re-balanced A100 + H100 pair beats one H100 alone, by less than 20 % ("pays,
    barely"), and a single row costs the A100 most of its re-balanced compute (a fixed cost)."""
    rows = syllabus.mixed_cluster_study(profiles=("a100-nvlink", "h100-nvlink"), global_batch=64, steps=2)
    by = {r["split"]: r for r in rows}
    gain = by["h100-nvlink alone"]["predicted_s"] / by["balanced"]["predicted_s"]
    assert 1 < gain < 1.2
    bal = by["balanced"]
    assert bal["one_row_before_s"][0] > 0.5 * bal["rank_before_s"][0]
    table = syllabus.mixed_markdown(rows)
    assert table.count("\n") == len(rows) + 1 and "| balanced | (5, 59) |" in table


def test_local_sgd_claim_says_how_few_steps():
    """10 §6: a +0.1 % loss after 8 steps is no evidence of stability, and the row says so."""
    local = [{"H": 8, "bytes_saved": 0.875, "loss_gap": 0.001, "losses": [3.0] * 8}]
    rows = claims(local_rows=local)
    row = next(r for r in rows if r["claim"].startswith("communication volume"))
    assert "after 8 steps (too few to speak of stability)" in row["kit"]
    # 10 §6 shows the claims one theme per cell: no row may fall outside the themes
    themes = syllabus.claims_by_theme(rows)
    assert "other" not in themes and sum(len(v) for v in themes.values()) == len(rows)


def test_spot_figure_draws_each_discount_twice():
    grid = syllabus.spot_verdicts()
    fig = plot_savings(grid, syllabus.best_savings(grid), syllabus.SPOT)
    assert len(fig.data) == 2 * len(syllabus.SPOT["discounts"])
    assert "predicted" in fig.layout.meta["mgpukit_title"]


@pytest.mark.parametrize("name", ["10_beyond"])
def test_notebook_teaching_cells_are_short_and_assert_free(name):
    """Issue 35: code cells ≤ 12 lines, no `assert` in a teaching cell; 10 ends with the course
    summary and where the code is."""
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(len(src.splitlines()) <= 12 for src in code)
    assert not [src for src in code if "assert " in src]
    last = "".join(nb["cells"][-1]["source"])
    assert "The course in one page" in last and "Where the code is" in last and "DiLoCo" in json.dumps(nb)


def test_frameworks_map_in_the_notebook_is_the_modules():
    """10 §5 shows the frameworks map as a markdown cell (a 3,000-character table printed by a code
    cell broke the 1,200-character rule): it must stay the module's table, character for character."""
    nb = json.loads((ROOT / "notebooks" / "10_beyond.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == "c18")
    assert cell["cell_type"] == "markdown"
    assert "".join(cell["source"]) == syllabus.frameworks_markdown(links=False)
