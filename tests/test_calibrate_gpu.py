"""`mgpukit calibrate` on a GPU, exercised on the CPU (`mgpukit.calibrate_gpu` is
device-agnostic: device events on CUDA, the wall clock elsewhere). No GPU was lent to the
sessions that wrote this: what runs here is the code path, at toy sizes — the figures are this
CPU's, meaningless for a GPU — and the refusal when CUDA is asked for and absent.
"""
import pytest
import torch

from mgpukit.calibrate_gpu import (measure_attention, measure_copy, measure_gemms, measure_host_per_op,
                                   profile_from_measurements, real_vs_emulated)
from mgpukit.costmodel.hardware import HardwareProfile, load_profile, profile_toml


def _measured():
    return {"device": "cpu", "torch": torch.__version__, "date": "today", "sms": 4,
            "gemm": measure_gemms("cpu", ((64, 64, 64), (128, 64, 96)), repeats=2),
            "attention": measure_attention("cpu", ((1, 2, 32, 16),), repeats=1),
            "copy_bytes_per_s": [measure_copy("cpu", numel=2**16, repeats=2)],
            "host_per_op_us": [measure_host_per_op("cpu", n=50) for _ in range(3)]}


def test_measurements_have_the_reference_files_shape_and_fit_into_a_loadable_profile(tmp_path):
    measured = _measured()
    assert {r["dtype"] for r in measured["gemm"]} == {"bfloat16", "float32"}
    assert all(r["s"] > 0 and r["tflops"] > 0 for r in measured["gemm"])
    assert all(r["fwd_s"] > 0 and r["bwd_s"] > 0 for r in measured["attention"])
    profile, fit = profile_from_measurements(measured, name="cpu-as-gpu", fit_factor=False)
    assert profile.gemm.sms == 4 and profile.gemm.fp32 is not None and profile.attention is not None
    assert profile.dispatch_overhead("forward") == pytest.approx(fit["host"]["forward"])
    path = tmp_path / "cpu-as-gpu.toml"
    path.write_text(profile_toml(profile, comment="test"))
    assert load_profile(str(path)) == profile
    assert isinstance(profile, HardwareProfile) and profile.async_launch  # a GPU profile: the host issues kernels


def test_real_vs_emulated_runs_the_plain_loop_both_ways():
    rows = real_vs_emulated("h200", device="cpu", configs=(("gpt-tiny", 2, "fp32", "sgd"),), steps=1)
    (row,) = rows
    assert row["config"] == "gpt-tiny b2 fp32 sgd" and row["measured_s"] > 0 and row["emulated_s"] > 0
    assert row["memory_ratio"] is None  # no CUDA allocator on a CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_calibrate_device_cuda_without_a_gpu_is_one_line_exit_2(capsys):
    from mgpukit.cli import main

    assert main(["calibrate", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
