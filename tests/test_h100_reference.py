"""The emulator held against a real H100 (`data/reference/h100-2026-11-26.json`, measured on an
H100 80GB HBM3, 2026-11-26), as tests/test_fit.py holds it against the H200 it was fitted on.

Method (`bench.reference.check_h100_rows`): the file's plain PyTorch steps — the clean figure
where realstep ran alone, else the one measured beside emulation (four configurations measured on
no other device: held out) — emulated in shape mode, step and allocator peak against the real
median and `max_memory_allocated`.

- ``h100-nvlink`` (fitted on the H200's micro-measurements; the H100's datasheet bandwidth):
  the GPU-bound steps (GPT-2 124M, where the kernels set the step) within 15 %, every peak
  within 10 %. Nothing in it was fitted on this file.
- The host-bound steps (gpt-tiny, gpt-small) are the host's, and the H100's host is not the
  H200's (per op 8–15 µs against 15–19), so ``h100-nvlink`` (the H200's host) is not held to
  them. A profile calibrated from this file (`calibrate_gpu.profile_from_measurements`: its
  micro-measurements, ``model_code_factor`` bisected on its gpt-tiny b8 fp32 SGD row) predicts
  gpt-small b8 fp32 SGD within 15 % (0.85 of the median; its spread is wide: min 9.13 ms against
  a median of 11.65). It does **not** predict the bf16 AdamW host-bound steps: gpt-small b8 0.77,
  and the held-out gpt-small b32 0.67 and gpt-tiny b32 0.72 (those two measured beside
  emulation, which slowed the host-bound rows 6–23 %). What bf16 and AdamW add to gpt-small's
  step is 7.2 ms on this host (18.83 − 11.65) and 4.5 ms emulated; the cause is not located:
  this host's per-op readings moved from 12–15 to 8.3–8.4 µs forward within one session (the
  file's ``host_per_op_us``), so one calibration does not pin it, and no device is left to
  measure the casts and the foreach optimizer alone. Stated, not asserted, and not tuned away.
"""
import pytest

from mgpukit.bench.reference import H100_TIME_TARGET, calibrated_profile, check_h100_rows

FIT_ROW = "gpt-tiny b8 fp32 sgd"


@pytest.fixture(scope="module")
def shipped():
    return {r["config"]: r for r in check_h100_rows("h100-nvlink")}


def test_every_configuration_of_the_file_is_checked_and_four_are_held_out(shipped):
    assert len(shipped) == 9
    assert sum(r["source"] == "held out" for r in shipped.values()) == 4
    assert {k for k, r in shipped.items() if r["bound"] == "GPU"} == {k for k in shipped if k.startswith("gpt2-124m")}


def test_h100_nvlink_emulates_the_h100s_gpu_bound_steps_within_15pct(shipped):
    gpu_bound = [r for r in shipped.values() if r["bound"] == "GPU"]
    assert len(gpu_bound) == 4 and any(r["source"] == "held out" for r in gpu_bound)
    for r in gpu_bound:
        assert r["time_ratio"] == pytest.approx(1.0, abs=H100_TIME_TARGET), r


def test_h100_nvlink_emulates_every_h100_peak_within_10pct(shipped):
    for r in shipped.values():
        assert r["memory_ratio"] == pytest.approx(1.0, abs=0.10), r


def test_a_profile_calibrated_from_the_file_predicts_gpt_small_fp32_on_that_host():
    """The calibrated profile on the host-bound steps it can be held to (module docstring): its
    fit row, and gpt-small b8 fp32 SGD within 15 %; the bf16 AdamW rows are a stated gap."""
    rows = {r["config"]: r for r in check_h100_rows(calibrated_profile(), keys={FIT_ROW, "gpt-small b8 fp32 sgd"})}
    assert rows[FIT_ROW]["time_ratio"] == pytest.approx(1.0, abs=0.02)  # fitted there, not a check
    check = rows["gpt-small b8 fp32 sgd"]
    assert check["bound"] == "host" and check["split"]["host"] > 0.9 * check["emulated_s"]
    assert check["time_ratio"] == pytest.approx(1.0, abs=H100_TIME_TARGET), check
