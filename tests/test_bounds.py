"""Measured figures: a median with its spread, and figures that break a physical bound flagged.

Records here are built by hand (step times chosen), so each bound is checked exactly: a speedup
above the worker count, a weak-scaling efficiency above 1, a strictly larger job that was faster.
"""
from __future__ import annotations

import pytest

from mgpukit.measure.bounds import (check_larger_job, check_speedup, check_weak_scaling,
                                    flag_scaling, show_flags)
from mgpukit.measure.spread import format_spread, summarize


def _rec(workers: int, step_s: list[float], *, batch: int = 64, mode: str = "cpu") -> dict:
    s = summarize(step_s)
    return {"world_size": workers, "mode": mode, "config": {"global_batch": batch},
            "step_time_s": step_s, "step_time": s, "tokens_per_s": batch / s["median_s"]}


def test_summary_is_the_median_of_the_steady_steps_with_quartiles():
    s = summarize([9.0, 1.0, 2.0, 3.0, 4.0, 100.0])  # 9.0 is warm-up; 100.0 an outlier
    assert s["skipped"] == 1 and s["n"] == 5
    assert s["median_s"] == 3.0 and s["p25_s"] == 2.0 and s["p75_s"] == 4.0
    assert s["spread"] == pytest.approx(2.0 / 3.0)
    assert s["min_s"] == 1.0 and s["max_s"] == 100.0
    assert summarize([0.5])["n"] == 1 and summarize([0.5])["skipped"] == 0
    assert summarize([]) is None
    assert format_spread(summarize([1, 0.010, 0.010, 0.011])) == "10 ms (median of 3 steps, IQR ±2 %)"


def test_speedup_above_the_worker_count_is_flagged_beyond_the_noise():
    one, two = _rec(1, [1.0] + [0.30] * 5), _rec(2, [1.0] + [0.10] * 5)  # 3× on 2 workers
    flag = check_speedup(one, two)
    assert flag["kind"] == "speedup_above_workers"
    assert flag["value"] == pytest.approx(3.0) and flag["bound"] == 2.0
    assert not flag["within_noise"] and "artefact" in flag["message"]
    assert check_speedup(one, _rec(2, [1.0] + [0.16] * 5)) is None  # 1.875×: possible


def test_an_excess_inside_the_spread_is_flagged_as_within_the_noise():
    one = _rec(1, [1.0, 0.17, 0.19, 0.20, 0.21, 0.23])  # IQR 0.19-0.21: ±5 %
    two = _rec(2, [1.0, 0.085, 0.093, 0.098, 0.103, 0.11])  # 2.04× the throughput, ±5 %
    flag = check_speedup(one, two)
    assert flag is not None and flag["within_noise"]


def test_weak_scaling_efficiency_above_one_and_a_faster_larger_job_are_flagged():
    one = _rec(1, [1.0] + [0.20] * 4, batch=32)
    fast2 = _rec(2, [1.0] + [0.12] * 4, batch=64)  # each worker the same 32 rows, yet faster
    assert check_weak_scaling(one, fast2)["value"] == pytest.approx(0.20 / 0.12)
    assert check_weak_scaling(one, _rec(2, [1.0] + [0.25] * 4, batch=64)) is None
    plain, delayed = _rec(2, [1.0] + [0.10] * 4), _rec(2, [1.0] + [0.08] * 4)  # delay added, faster?
    flag = check_larger_job(plain, delayed, what="the slow loader")
    assert flag["kind"] == "larger_job_faster" and "slow loader" in flag["figure"]
    assert flag["figure"] == "step of the smaller job / step of the slow loader"
    named = check_larger_job(plain, delayed, what="the slow loader", baseline="the fast loader")
    assert named["figure"] == "step of the fast loader / step of the slow loader"
    assert check_larger_job(plain, _rec(2, [1.0] + [0.12] * 4)) is None


def test_flag_scaling_writes_flags_into_the_records_and_show_flags_prints_them():
    recs = [_rec(1, [1.0] + [0.4] * 4), _rec(2, [1.0] + [0.25] * 4), _rec(4, [1.0] + [0.05] * 4),
            _rec(8, [1.0] + [0.001] * 4, mode="emulated")]  # emulated: never against a measured base
    flags = flag_scaling(recs, "strong")
    assert [f["figure"] for f in flags] == ["speedup of 4 workers over 1"]
    assert recs[2]["flags"] == flags and "flags" not in recs[1] and "flags" not in recs[3]
    text = show_flags(recs)
    assert text.startswith("⚠ speedup of 4 workers over 1 = 8.00 breaks the bound 4.00")
    assert show_flags(recs[:2]) == ""
    assert show_flags(flags) == text


def test_the_speedup_figure_marks_a_flagged_point():
    from mgpukit.plots import plot_speedup

    recs = [_rec(1, [1.0] + [0.4] * 4), _rec(2, [1.0] + [0.1] * 4)]
    recs[0]["strategy"], recs[1]["strategy"] = "single", "dp-bucketed"
    flag_scaling(recs, "strong")
    traces = {t.name: t for t in plot_speedup(recs).data}
    marked = traces["⚠ breaks a physical bound"]
    assert list(marked.x) == [2] and list(marked.y) == [4.0] and "breaks the bound" in marked.text[0]
    assert "⚠ breaks a physical bound" not in {t.name for t in plot_speedup(recs[:1] + [_rec(2, [1.0] + [0.3] * 4)]).data}
