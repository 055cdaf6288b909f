"""Issue 38's new bad inputs: one line `mgpukit: error: <cause>`, exit code 2, nothing launched.

Method as in `tests/test_bad_input.py`: the CLI's `main(argv)` runs in this process with the
launcher's process start replaced by a tripwire, and each case must come back as exactly one
stderr line naming its cause. Model and profile files are written from a shipped one with one
line changed (`files` fixture), so each case differs from a good file by the mistake alone.
Each case here failed on the code before issue 38 (a traceback, a hang, or accepted nonsense)."""
import shlex
import time
from pathlib import Path

import pytest

from mgpukit.cli import main
from mgpukit.runtime import launcher

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def no_launch(monkeypatch):
    def tripwire(*a, **k):
        raise AssertionError("a launch started although the input was bad")
    monkeypatch.setattr(launcher, "_run", tripwire)


def _variant(tmp_path, source: Path, name: str, old_start: str, new_line: str, *, first_only=False) -> str:
    lines, done = [], False
    for line in source.read_text().splitlines():
        if line.startswith(old_start) and not (first_only and done):
            line, done = new_line, True
        lines.append(line)
    assert done, f"{old_start!r} not in {source}"
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def files(tmp_path):
    model, profile = DATA / "models" / "7b.toml", DATA / "hardware" / "h100-nvlink.toml"
    text = profile.read_text()
    (tmp_path / "unknown.toml").write_text(text.replace("gpus_per_node =", "gpus_per_nodes = 8\ngpus_per_node ="))
    return {
        "kv_neg": _variant(tmp_path, model, "kvneg.toml", "kv_heads =", "kv_heads = -4"),
        "kv_zero": _variant(tmp_path, model, "kvzero.toml", "kv_heads =", "kv_heads = 0"),
        "name_list": _variant(tmp_path, model, "namelist.toml", "name =", "name = [1, 2]"),
        "layers_huge": _variant(tmp_path, model, "layers.toml", "layers =", f"layers = {2**63 - 1}"),
        "hidden_huge": _variant(tmp_path, model, "hidden.toml", "hidden =", f"hidden = {10**12}"),
        "seq_huge": _variant(tmp_path, model, "seq.toml", "seq =", f"seq = {10**12}"),
        "unknown_key": str(tmp_path / "unknown.toml"),
        "no_forward": _variant(tmp_path, profile, "nofwd.toml", "forward =", "# no forward"),
        "k_half": _variant(tmp_path, profile, "khalf.toml", "k_half =", "k_half = -64", first_only=True),
        "alpha": _variant(tmp_path, profile, "alpha.toml", "alpha =", "alpha = 1e300", first_only=True),
        "memory": _variant(tmp_path, profile, "memory.toml", "memory_bytes =", "memory_bytes = 1e-300"),
    }


MODEL_CASES = [
    ("kv_neg", "kv_heads = -4 is out of range"),
    ("kv_zero", "kv_heads = 0 is out of range"),
    ("name_list", "name must be a quoted string, got array [1, 2]"),
    ("layers_huge", "layers = 9223372036854775807 is out of range"),
    ("hidden_huge", "hidden = 1000000000000 is out of range"),
    ("seq_huge", "seq = 1000000000000 is out of range"),
]
PROFILE_CASES = [
    ("unknown_key", "unknown key 'gpus_per_nodes'"),
    ("no_forward", "attention.forward is missing"),
    ("k_half", "gemm.k_half = -64 is out of range"),
    ("alpha", "intra_node.alpha = 1e+300 is out of range"),
    ("memory", "memory_bytes = 1e-300 is out of range"),
]

CLI_CASES = (
    [(f"plan --model-file {{{key}}}", cause) for key, cause in MODEL_CASES]
    + [(f"plan --model-file {{{key}}} --search", cause) for key, cause in MODEL_CASES]
    + [(f"plan --profile {{{key}}}", cause) for key, cause in PROFILE_CASES]
    + [(f"run ddp --emulate {{{key}}}", cause) for key, cause in PROFILE_CASES]
    + [(f"tour --emulate {{{key}}}", cause) for key, cause in PROFILE_CASES]
    + [
        (f"plan --layers {10**12} --hidden 4096 --heads 32 --vocab 32000 --seq 4096 --search",
         "layers = 1000000000000 is out of range"),
        (f"plan --model 7b --layers {10**12} --search", "layers = 1000000000000 is out of range"),
        (f"plan --model 7b --seq {10**12}", "seq = 1000000000000 is out of range"),
        # timeouts and knobs (mgpukit.limits, strategies' knobs)
        ("run ddp --timeout 1e300", "argument --timeout: 1e300 must be between 1 s and 604800 s"),
        ("run ddp --timeout 1e-9", "argument --timeout: 1e-9 must be between 1 s"),
        ("run ddp --collective-timeout 1e-9", "argument --collective-timeout: 1e-9 must be between"),
        ("run ddp --collective-timeout 1e300", "argument --collective-timeout: 1e300 must be between"),
        ("""run ddp -o 'straggler={"rank": 1, "factor": 1e308}'""", "F a number from 1 to 1000"),
        (f"run dp-int8 -o chunk={10**12}", "option chunk=1000000000000 (dp-int8): must be at most"),
        ("run ddp -o loader_delay_s=1e9", "option loader_delay_s=1000000000.0 (ddp): must be at most 60"),
        ("run pp-interleaved --pp 2 -o v=3 --v 2", "--v 2 and -o v=3 disagree"),
        ("run ddp -o bucket_mb=1 -o bucket_mb=2", "-o bucket_mb is given twice"),
        ("run ddp -o bucket_mb=1 -o bucket_mb=1", "-o bucket_mb is given twice"),
        ("tour --only ddp ddp", "--only names ddp more than once"),
        ("tour --workers 1 --only ps-sync", "--only ps-sync needs at least 2 workers and the tour runs 1"),
        ("bench launch --profile nope", "--profile nope is the profile `bench emulation --real` emulates"),
        ("bench emulation --real --profile nope", "unknown hardware profile 'nope'"),
        ("bench launch --real", "--real is for `bench emulation`"),
        # memory: every model the kit builds (MLPs by their sizes), and bench on CPU
        ("""run ddp --model mlp-tiny -o 'model_sizes={"d_hidden": 1000000}'""", "needs at least"),
        ("""run ddp --model mlp-tiny -o 'model_sizes={"n_layers": 1000000000}'""", "needs at least"),
        ("bench overhead --model gpt2-1.3b --mode cpu", "gpt2-1.3b with single"),
        ("bench overhead --model gpt2-124m --mode cpu --quick", "bench overhead would train"),
    ]
)


def _fill(arg: str, files: dict) -> str:
    for key, path in files.items():
        arg = arg.replace("{" + key + "}", path)
    return arg


@pytest.mark.parametrize("argv, cause", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_a_bad_input_is_one_line_exit_2_nothing_launched(argv, cause, files, no_launch, capsys):
    args = [_fill(a, files) for a in shlex.split(argv)]
    start = time.perf_counter()
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("mgpukit: error: ") and cause in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert seconds < 30, f"refused only after {seconds:.0f} s"


def test_every_shipped_model_and_profile_passes_the_schema():
    from mgpukit.costmodel.hardware import load_profile
    from mgpukit.costmodel.shapes import load_model_file

    for path in sorted((DATA / "models").glob("*.toml")):
        load_model_file(path)
    for path in sorted((DATA / "hardware").glob("*.toml")):
        load_profile(str(path))


@pytest.mark.skipif(__import__("mgpukit.runtime.hardware", fromlist=["x"]).cuda_device_count() > 0,
                    reason="a GPU is visible: --real is allowed")
def test_bench_real_without_a_gpu_is_refused_before_any_benchmark(capsys, no_launch):
    assert main(["bench", "emulation", "--real"]) == 2
    err = capsys.readouterr()
    assert "none is visible here" in err.err and "== bench" not in err.out


# ------------------------------------------------------------------ the environment


@pytest.mark.parametrize("var, value, cause", [
    ("TORCH_DISTRIBUTED_DEBUG", "BOGUS", "TORCH_DISTRIBUTED_DEBUG='BOGUS' in the environment: torch accepts"),
    ("GLOO_SOCKET_IFNAME", "nonexistent0", "GLOO_SOCKET_IFNAME='nonexistent0' in the environment names no"),
    ("GLOO_SOCKET_IFNAME", "lo,nonexistent0", "names no interface of this machine (nonexistent0)"),
])
@pytest.mark.parametrize("command", ["run ddp --steps 1", "tour --only ddp", "bench launch"])
def test_an_environment_torch_or_gloo_rejects_is_one_line_before_launch(var, value, cause, command,
                                                                        monkeypatch, capsys, no_launch):
    monkeypatch.setenv(var, value)
    assert main(shlex.split(command)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mgpukit: error: ") and cause in lines[0], lines


def test_the_api_checks_the_environment_before_forking(monkeypatch, no_launch):
    import mgpukit

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nonexistent0")
    with pytest.raises(launcher.LaunchError, match="names no interface"):
        mgpukit.launch(_noop, 2)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "bogus")
    with pytest.raises(launcher.LaunchError, match="TORCH_DISTRIBUTED_DEBUG"):
        mgpukit.launch(_noop, 2)


def _an_interface_off_loopback():
    import psutil

    from mgpukit.environment import _is_loopback

    return next((n for n, a in sorted(psutil.net_if_addrs().items()) if not _is_loopback(a)), None)


@pytest.mark.skipif(_an_interface_off_loopback() is None, reason="no interface besides loopback")
def test_a_launch_warns_when_the_environment_moves_gloo_off_loopback(monkeypatch, no_launch):
    from mgpukit import environment

    monkeypatch.setattr(environment, "_WARNED", set())
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", _an_interface_off_loopback())
    with pytest.warns(environment.OffLoopbackWarning, match="off loopback"):
        with pytest.raises(AssertionError, match="a launch started"):  # allowed: it may be meant
            launcher.launch(_noop, 2, mode="cpu")
    monkeypatch.setattr(environment, "_WARNED", set())
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", environment.OffLoopbackWarning)
        with pytest.raises(AssertionError, match="a launch started"):
            launcher.launch(_noop, 2, mode="cpu")


# ------------------------------------------------------------------ the Python API


def _noop():
    return None


API_CASES = [
    ("launch", dict(world_size=2, timeout_s=1e300), launcher.LaunchError, "timeout_s=1e+300: must be between"),
    ("launch", dict(world_size=2, timeout_s=1e-9), launcher.LaunchError, "timeout_s=1e-09: must be between"),
    ("launch", dict(world_size=2, collective_timeout_s=1e-9), launcher.LaunchError, "collective_timeout_s=1e-09"),
    ("launch", dict(world_size=2, threads_per_worker=0), launcher.LaunchError, "threads_per_worker=0"),
    ("launch", dict(world_size=2, threads_per_worker=-1), launcher.LaunchError, "threads_per_worker=-1"),
    ("launch", dict(world_size=2, threads_per_worker=10**6), launcher.LaunchError, "threads_per_worker=1000000"),
    ("launch", dict(world_size=1000), launcher.LaunchError, "world_size=1000: at most 256 workers"),
    ("launch", dict(world_size=2, fn="noop"), launcher.LaunchError, "is not callable"),
    ("launch", dict(world_size=2, options="x"), launcher.LaunchError, "options='x': give a dict"),
    ("launch", dict(world_size=2, dims="x"), launcher.LaunchError, "dims='x': give a ParallelDims"),
    ("launch", dict(world_size=2, host=5), launcher.LaunchError, "host=5: give a str"),
    ("launch", dict(world_size=2, mode="emulated", profile=5), ValueError, "hardware profile 5: give"),
    ("run", dict(timeout_s=1e300), ValueError, "timeout_s=1e+300: must be between"),
    ("run", dict(collective_timeout_s=1e-9), ValueError, "collective_timeout_s=1e-09"),
    ("run", dict(threads_per_worker=0), ValueError, "threads_per_worker=0"),
    ("run", dict(threads_per_worker=10**6), ValueError, "threads_per_worker=1000000"),
    ("run", dict(config="x"), TypeError, "config='x': give a mgpukit.config.RunConfig"),
    ("run", dict(layout="x"), TypeError, "layout='x': give a dict"),
    ("run", dict(mode="emulated", profile=5), ValueError, "hardware profile 5: give"),
    ("run", dict(json_path=5), TypeError, "path 5: give a str or a pathlib.Path"),
    ("run", dict(trace_path=["a"]), TypeError, "path ['a']: give a str or a pathlib.Path"),
    ("run", dict(tolerance="x"), TypeError, "tolerance='x': give a dict"),
    ("run", dict(nope=1), TypeError, "unknown argument 'nope'"),
    ("run", dict(parity="x"), TypeError, "parity='x': give True or False"),
    ("run", dict(echo="x"), TypeError, "echo='x': give True or False"),
    ("run", dict(model="mlp-tiny", options={"model_sizes": {"d_hidden": 10**6}}), ValueError, "needs at least"),
]


@pytest.mark.parametrize("fn, kwargs, error, cause", API_CASES,
                         ids=[f"{c[0]}-{'-'.join(f'{k}={v}' for k, v in c[1].items())}" for c in API_CASES])
def test_the_python_api_refuses_before_forking(fn, kwargs, error, cause, no_launch):
    import mgpukit

    kwargs = dict(kwargs)
    if fn == "launch":
        call = lambda: mgpukit.launch(kwargs.pop("fn", _noop), kwargs.pop("world_size"), **kwargs)  # noqa: E731
    else:
        call = lambda: mgpukit.run("ddp", **kwargs)  # noqa: E731
    with pytest.raises(error) as info:
        call()
    assert cause in str(info.value) and "\n" not in str(info.value)
