"""Spot instances: a preempted-and-resumed run ends with the uninterrupted run's weights; the
cost model's limits (no preemption: stretch = 1 + δ/τ; savings never beat the discount; Young's
interval minimises the stretch); the README carries the frameworks map notebook 10 prints.

Method. `lessons.syllabus.preempted_run` kills rank 1 (SIGKILL, as a reclaimed instance) after
steps 2 and 4 of 6, before those steps' checkpoints (every 2 steps), and restarts from the
latest checkpoint each time; its final weights must equal (bitwise) those of one uninterrupted
run, with the work since the last checkpoint redone.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import mgpukit
from mgpukit.costmodel import spot
from mgpukit.experiment import load_weights
from mgpukit.lessons import syllabus


def test_preempted_and_resumed_run_ends_with_the_same_weights(tmp_path):
    whole = mgpukit.run("ddp", workers=2, steps=6, parity=False, weights_path=tmp_path / "whole.safetensors")
    pre = syllabus.preempted_run(tmp_path / "spot", strategy="ddp", steps=6, checkpoint_every=2,
                                 preempt_at=(2, 4), weights_path=tmp_path / "pre.safetensors")
    assert pre["restarts"] == [1, 1]  # two preemptions of rank 1, both survived
    assert pre["steps_redone"] == 2  # step 2 and step 4, each lost before its checkpoint
    assert len(pre["record"]["step_time_s"]) == 2  # the last attempt ran only steps 4 and 5
    assert pre["record"]["losses"] == whole["losses"]
    a, b = load_weights(tmp_path / "whole.safetensors"), load_weights(tmp_path / "pre.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_spot_cost_limits():
    no_preempt = spot.spot_cost(3600 * 10, gpus=8, price_per_gpu_hour=2.0, discount=0.7,
                                preemptions_per_hour=0, checkpoint_every_s=600, checkpoint_s=60)
    assert no_preempt["stretch"] == pytest.approx(1 + 60 / 600)
    assert no_preempt["savings"] == pytest.approx(1 - 0.3 * 1.1)
    grid = spot.savings_grid(discount=0.7)
    assert all(r["savings"] < 0.7 for r in grid)
    assert [r["savings"] for r in grid if r["checkpoint_every_s"] == 3600] == sorted(
        (r["savings"] for r in grid if r["checkpoint_every_s"] == 3600), reverse=True)  # more preemption, less saved
    best = spot.optimal_interval(60, 1.0)
    stretch = {tau: spot.expected_wall_time(3600, checkpoint_every_s=tau, checkpoint_s=60,
                                            preemptions_per_hour=1.0) for tau in (best / 3, best, best * 3)}
    assert stretch[best] < stretch[best / 3] and stretch[best] < stretch[best * 3]


def test_readme_carries_the_frameworks_map():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert syllabus.frameworks_markdown() in readme
    root = Path(__file__).resolve().parents[1]
    for *_, nb, module in syllabus.FRAMEWORKS:
        assert (root / "notebooks" / f"{nb}.ipynb").exists() and (root / module).exists(), (nb, module)
