"""Notebook 09's "why above any published H100 run" (`mgpukit.lessons.mfu_gap`): the split of the
gap and the network margin are arithmetic on the planner's own plans, checked here."""
from __future__ import annotations

import pytest

from mgpukit.costmodel.planner import search
from mgpukit.lessons import mfu_gap


@pytest.fixture(scope="module")
def gap():
    best = {"70B, 64 H100": search("70b", 64, "h100-ib", global_batch=1024, top=1)[0]}
    return mfu_gap.mfu_gap(best, tokens={"70B, 64 H100": 2e12})


def test_each_step_is_its_terms(gap):
    for col in gap["columns"].values():
        assert sum(col["shares"].values()) == pytest.approx(1.0, rel=1e-9)
        assert col["compute_only_mfu"] > col["mfu"]


def test_the_gap_splits_into_the_planners_terms_and_its_error(gap):
    assert gap["planner_terms_points"] + gap["error_points"] == pytest.approx(gap["gap_points"])
    for name, (pl, published) in mfu_gap.llama3_published().items():
        assert gap["errors"][name] == pytest.approx(pl.mfu / published - 1)


def test_network_margin_is_where_the_step_grows_one_percent(gap):
    net = gap["network"]
    pl = next(iter(mfu_gap.llama3_published().values()))[0]
    assert net["margin"] is not None and net["margin"] > 1
    base = pl.step_time_s
    assert mfu_gap._slower_network(pl, net["margin"] * 1.001).step_time_s > base * 1.01
    assert mfu_gap._slower_network(pl, net["margin"] / 1.001).step_time_s <= base * 1.01
    assert net["at_oversubscription"].step_time_s > base


def test_where_the_planner_was_checked(gap):
    assert gap["h100_checks"] and all("H100" in n for n in gap["h100_checks"])
    assert all(p.startswith("a100") for p in gap["error_bar_profiles"])  # the 64-GPU plans' bar: A100 rows
    h = gap["hours"]["70B, 64 H100"]
    assert h["with_effective_time"] == pytest.approx(h["planned"] / mfu_gap.L3_EFFECTIVE_TRAINING_TIME)
