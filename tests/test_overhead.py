"""`bench overhead` and `bench gpu`: what they compare is the same training, and they run.

Method: the plain PyTorch loop and the kit's step train the same model from the same weights on
the same batches with the same optimizer — asserted on their losses, step by step, at fp32
tolerances (an overhead ratio between two different trainings would mean nothing). Timings are
not asserted (a shared machine); the ratios' presence and shape are. `bench gpu --mode cpu
--quick` is the CPU rehearsal of the GPU check (`make test-gpu MODE=cpu QUICK=1`).
"""
from __future__ import annotations

import types

import pytest
import torch

from mgpukit.bench.gpu import bench_gpu
from mgpukit.bench.overhead import measure_overhead


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_plain_loop_trains_exactly_what_the_kit_trains(optimizer):
    out = measure_overhead(optimizer=optimizer, steps=4, repeats=1, mode="cpu", strategies=("single", "ddp"))
    for name in ("single", "ddp"):
        losses = out["rows"][name]["losses"]
        assert len(losses["plain"]) == len(losses["kit"]) == 4
        torch.testing.assert_close(torch.tensor(losses["kit"]), torch.tensor(losses["plain"]),
                                   rtol=1.3e-6, atol=1e-5)
        row = out["rows"][name]
        assert row["ratio"] > 0 and len(row["ratios"]) == 1 and row["kit"][0]["n"] == 3
    assert out["rows"]["single"]["held_to_target"] and not out["rows"]["ddp"]["held_to_target"]


def test_the_gpu_check_rehearses_on_cpu():
    args = types.SimpleNamespace(quick=True, mode="cpu", workers=None)
    result = bench_gpu(args)
    assert result["ok"], result
    assert [r["strategy"] for r in result["strategies"]] == ["ddp", "dp-bucketed", "zero3", "pp-1f1b"]
    assert all(r["ok"] for r in result["strategies"])
    assert result["overhead"][0]["rows"]["single"]["ratio"] > 0
    assert result["emulation"][0]["emulated_over_real"] > 0
    refusal = result["real_scale"][-1]
    assert refusal["model"] == "llama-7b" and refusal["refused_in_one_line"]
