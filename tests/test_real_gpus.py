"""Notebook 00's real-GPU cell: the two reference files read, each beside its profile's emulation."""
from mgpukit.lessons import held_against_real_gpus


def test_each_measured_gpu_is_labelled_and_held_against_its_own_profile():
    h200, h100 = held_against_real_gpus()
    assert h200["gpu"] == "measured on an H200, 2026-11-26" and h200["profile"] == "h200"
    assert h100["gpu"] == "measured on an H100 80GB HBM3, 2026-11-26" and h100["profile"] == "h100-nvlink"
    # the H200's plain gpt-tiny step is the row the profiles' model-code factor was fitted on
    assert abs(h200["plain_emulated_s"] / h200["plain_measured_s"] - 1) < 0.02
    # the kit's 1-worker ddp only where the file says it ran ddp with today's trainer (the H100)
    assert h200["kit_measured_s"] is None and 1e-3 < h100["kit_measured_s"] < 0.1
    for g in (h200, h100):
        assert set(g["host_measured_us"]) == set(g["host_profile_us"]) == {"forward", "backward", "no_grad"}
        assert all(1 < us < 100 for us in g["host_measured_us"].values())
