"""The slowest of N GPUs (mgpukit.costmodel.fleet, the planner's ``straggler_s``): zero for one GPU,
growing with N, absent where a profile's GEMM rate was read off whole runs (A100), and moving the
Llama 3 rows (one GPU's rate on 8K-16K GPUs) by exactly its seconds (removing it fails these tests)."""
import math

import pytest

from mgpukit.costmodel import validation
from mgpukit.costmodel.fleet import expected_max, expected_range, slowest_fraction
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.planner import plan


def test_expected_max_of_normals_matches_the_exact_values():
    """E[max of 2] = 1/sqrt(pi) exactly; E[max of 8] = 1.4236 and of 1,024 = 3.2414... (tables of
    normal order statistics, e.g. Harter 1961): the integral, not an approximation, and 0 for one."""
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max(8) == pytest.approx(1.4236, abs=1e-4)
    assert expected_range(8) == pytest.approx(2.8472, abs=1e-4)
    values = [expected_max(n) for n in (1, 2, 8, 64, 1024, 8192, 16384)]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_the_single_gpu_profiles_carry_bekmans_spread_and_the_a100_profiles_none():
    """[scale] gpu_spread = 5 % range on an 8-GPU node (Bekman) as a normal's spread, on the profiles
    whose GEMM rate is one GPU's measurement; none on the A100 profiles (whole-run rate)."""
    for name in ("h100-ib", "h100-nvlink", "h100-pcie", "h200"):
        assert load_profile(name).gpu_spread == pytest.approx(0.05 / expected_range(8), abs=5e-5), name
    for name in ("a100-nvlink", "a100-opa"):
        assert load_profile(name).gpu_spread == 0.0, name


def _plan(profile, dp, **kw):
    layout = Layout(dp=dp, tp=8, pp=1, micro_batch=1, num_micro_batches=4, sp=True, zero=1)
    return plan("70b", dp * 8, profile, layout, **kw)


def test_the_straggler_term_is_zero_for_one_gpu_and_grows_with_the_gpus():
    """On an H100 profile: 0 on one GPU; then the GEMM seconds times sigma · E[max of N], growing
    with N; the step is longer by exactly that term; --no-stragglers removes it."""
    one = plan("1.3b", 1, "h100-ib", Layout(micro_batch=1, num_micro_batches=1))
    assert one.time["straggler_s"] == 0.0
    sigma = load_profile("h100-ib").gpu_spread
    terms = []
    for dp in (1, 8, 64, 1024):
        pl, off = _plan("h100-ib", dp), _plan("h100-ib", dp, stragglers=False)
        n = dp * 8
        assert pl.time["straggler_s"] == pytest.approx(sigma * expected_max(n) * pl.time["compute_s"], rel=1e-9)
        assert off.time["straggler_s"] == 0.0
        assert pl.time["total_s"] == pytest.approx(off.time["total_s"] + pl.time["straggler_s"], rel=1e-9)
        terms.append(pl.time["straggler_s"] / pl.time["compute_s"])
    assert terms == sorted(terms) and terms[0] > 0 and terms[-1] == pytest.approx(slowest_fraction(8192, sigma))


def test_no_straggler_term_on_a100_profiles_whose_rate_already_holds_it():
    for dp in (1, 64, 1024):
        pl = _plan("a100-nvlink", dp)
        assert pl.time["straggler_s"] == 0.0
        assert pl.time["total_s"] == _plan("a100-nvlink", dp, stragglers=False).time["total_s"]


def test_the_straggler_term_moves_only_the_rows_on_one_gpu_rates():
    """The Llama 3 rows (h100-ib: one GPU's rate) lose MFU by exactly the straggler seconds they
    gain — 8,192 and 16,384 GPUs, sigma 1.76 %: the slowest GPU 6.7-7.0 % slower, ~4.6 % of the step
    (the GEMMs are ~2/3 of it) — so the planner is less optimistic on both; no A100 row moves."""
    for run in validation.runs():
        on, off = validation.predict(run), validation.predict(run, stragglers=False)
        if "H100" in run.name:
            t_on, t_off = on["time"]["total_s"], off["time"]["total_s"]
            assert t_on == pytest.approx(t_off + on["time"]["straggler_s"], rel=1e-9)
            assert (1 + off["error"]) / (1 + on["error"]) == pytest.approx(t_on / t_off, rel=1e-9)
            assert off["error"] - on["error"] > 0.04, run.name
        else:
            assert on["error"] == off["error"] and on["time"]["straggler_s"] == 0.0, run.name
