"""`mgpukit calibrate`: a quick calibration on this host gives a usable `this-machine` profile.

Method: run the real measurement (2 launched CPU workers, quick settings) into a temporary
file — never the user's cache — and check the figures are positive, round-trip through the
TOML loader, and that the virtual clock picks up the measured per-op overhead. The alpha-beta
fit is checked on synthetic times generated from known alpha and beta.
"""
import pytest

from mgpukit.calibrate import calibrate
from mgpukit.costmodel.comm import fit_alpha_beta, ring_link
from mgpukit.costmodel.hardware import load_profile, user_profile_dir


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    user_file = user_profile_dir() / "this-machine.toml"
    before = user_file.stat().st_mtime_ns if user_file.exists() else None
    path = tmp_path_factory.mktemp("hw") / "this-machine.toml"
    profile = calibrate(quick=True, out=path, verbose=False)
    after = user_file.stat().st_mtime_ns if user_file.exists() else None
    return profile, path, before == after


def test_quick_calibration_measures_positive_figures_and_leaves_the_user_cache_alone(calibrated):
    profile, path, cache_untouched = calibrated
    assert cache_untouched
    assert profile.name == "this-machine"
    assert profile.flops("fp32") > 1e8 and profile.flops("bf16") > 0 and profile.flops("fp16") > 0
    assert profile.memory_bandwidth > 1e8
    assert profile.intra_node.beta > 1e6 and profile.intra_node.alpha >= 0
    assert 0 < profile.op_overhead < 1e-3
    assert set(profile.op_overhead_by_context) == {"forward", "backward", "no_grad"}
    assert all(0 < v < 1e-3 for v in profile.op_overhead_by_context.values())
    assert profile.compute_efficiency == 1.0  # measured FLOP/s are achieved, not peak


def test_saved_profile_loads_back_and_the_clock_reads_its_op_overhead(calibrated):
    profile, path, _ = calibrated
    loaded = load_profile(str(path))
    assert loaded.to_dict() == profile.to_dict()
    assert "measured" in path.read_text().splitlines()[0].lower()
    assert loaded.op_overhead == profile.op_overhead > 0
    assert loaded.op_overhead_by_context == profile.op_overhead_by_context
    assert loaded.dispatch_overhead("backward") == profile.op_overhead_by_context["backward"]


def _ring(times: dict, n: int):
    """The ring link `calibrate` derives from all-reduce times {bytes: seconds} on n ranks."""
    return ring_link(fit_alpha_beta(list(times), list(times.values())), n)


@pytest.mark.parametrize("n", [2, 4])
def test_alpha_beta_fit_recovers_the_ring_formula(n):
    alpha, beta = 3e-4, 1.5e9
    times = {b: 2 * (n - 1) * alpha + 2 * (n - 1) / n * b / beta for b in (2**10, 2**16, 2**20, 2**24)}
    link = _ring(times, n)
    a, b = link.alpha, link.beta
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6)


def test_cli_has_calibrate_with_quick_workers_and_out(tmp_path):
    from mgpukit.cli import build_parser

    args = build_parser().parse_args(["calibrate", "--quick", "--workers", "2", "--out", str(tmp_path / "x.toml")])
    assert args.quick and args.workers == 2 and args.out.endswith("x.toml") and callable(args.func)


def test_alpha_beta_fit_stays_physical_when_noise_swamps_the_transfers():
    times = {2**10: 2e-3, 2**16: 1e-3, 2**20: 0.8e-3, 2**22: 3e-3}  # not monotonic: a busy host
    link = _ring(times, 2)
    assert link.alpha >= 0 and 0 < link.beta < float("inf")
    link = _ring({2**10: 3e-3, 2**20: 2e-3, 2**22: 1e-3}, 2)  # falling: no slope
    assert link.alpha >= 0 and 0 < link.beta < 1e12
