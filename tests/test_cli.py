"""The `mgpukit` command line, run in-process and as a real console script."""
import json
import subprocess
import sys

import pytest

from mgpukit.cli import main


def test_info_prints_devices_and_defaults(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cores:" in out and "default mode:" in out and "torch" in out


def test_list_shows_the_registered_strategies(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "single" in out and "ddp" in out


def test_run_ddp_writes_a_record_with_parity_ok(tmp_path):
    path, trace = tmp_path / "r.json", tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "mgpukit.cli", "run", "ddp", "--workers", "2",
                           "--steps", "20", "--json", str(path), "--trace", str(trace)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(path.read_text())
    assert record["strategy"] == "ddp" and record["world_size"] == 2
    assert len(record["losses"]) == 20
    assert record["parity"]["reference"] == "single" and record["parity"]["ok"] is True
    assert json.loads(trace.read_text())["traceEvents"]
    assert "parity" in proc.stdout


def test_run_emulated_labels_the_record(tmp_path, capsys):
    path = tmp_path / "e.json"
    assert main(["run", "ddp", "--workers", "2", "--steps", "2", "--emulate", "h100-nvlink",
                 "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert record["mode"] == "emulated" and record["profile"] == "h100-nvlink"
    assert "emulated" in capsys.readouterr().out


def test_bench_launch_reports_the_time(capsys):
    assert main(["bench", "launch", "--repeats", "1"]) == 0
    assert "launch 4 CPU workers" in capsys.readouterr().out


def test_plan_answers(capsys):
    assert main(["plan", "--model", "70b", "--gpus", "64", "--profile", "h100-nvlink",
                 "--dp", "8", "--tp", "8", "--pp", "1"]) in (0, 1)
    assert "predicted" in capsys.readouterr().out


# ------------------------------------------------------------------ errors a user can act on

BAD_INPUTS = [
    (["run", "pp-interleaved", "--workers", "4"], "cannot be cut into 8 equal pipeline stages"),
    (["run", "ddp", "--workers", "3"], "multiple of 3"),
    (["run", "nope"], "mgpukit list"),
    (["run", "ddp", "--workers", "0"], "--workers: 0 must be at least 1"),
    (["run", "ddp", "-o", "bucket_mb"], "KEY=VALUE"),
    (["run", "ddp", "--steps", "x"], "not a whole number"),
    (["run", "ddp", "--emulate", "nope"], "unknown hardware profile 'nope'"),
    (["plan", "--tp", "0"], "--tp 0"),
    (["plan", "--model", "70b", "--gpus", "24", "--tp", "3"], "choose tp in"),
    (["plan", "--profile", "{bad_toml}"], "bad.toml"),
    (["bench", "--repeats", "-1"], "--repeats: -1"),
    (["bench", "nope"], "unknown benchmark 'nope'"),
    ([], "required: command"),
]


# Through the real console entry point (a fresh interpreter: ~3 CPU-seconds each), one case per
# way a mistake reaches it: a run refused by `prepare`, a flag argparse refuses, a file the
# planner cannot read, an unknown benchmark, no command at all. The others run `main` in this
# process, with the same assertions (and `tests/test_bad_input.py` holds the whole table).
CONSOLE = {"run ddp --workers 3", "run ddp --steps x", "plan --profile {bad_toml}", "bench nope", ""}


def _cli(argv, **kw):
    return subprocess.run([sys.executable, "-m", "mgpukit.cli", *argv], capture_output=True,
                          text=True, timeout=300, **kw)


def _in_process(argv, capsys, monkeypatch):
    from mgpukit.runtime import launcher

    monkeypatch.setattr(launcher, "_run", lambda *a, **k: pytest.fail("launched although the input was bad"))
    try:
        code = main(argv)
    except SystemExit as e:  # argparse refuses from inside the parser
        code = e.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out.out, out.err)


@pytest.mark.parametrize("argv, cause", BAD_INPUTS, ids=lambda x: " ".join(x) if isinstance(x, list) else "")
def test_a_bad_input_is_one_line_and_exit_code_2(argv, cause, tmp_path, capsys, monkeypatch):
    """Method: run the real console entry point in a subprocess (the `CONSOLE` cases; the rest
    through `main` in this process); a mistake in what was asked must come back as exactly one
    stderr line `mgpukit: error: ...` naming the cause — no traceback, no warnings — and exit
    code 2."""
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [\n")  # not TOML: the error must name the file
    args = [a.format(bad_toml=bad) for a in argv]
    proc = _cli(args) if " ".join(argv) in CONSOLE else _in_process(args, capsys, monkeypatch)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mgpukit: error: ") and cause in lines[0], lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_the_console_cases_are_in_the_table():
    assert CONSOLE <= {" ".join(argv) for argv, _ in BAD_INPUTS}


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(where):
    argv = ["run", "ddp", "--workers", "3"]
    proc = _cli(["--debug", *argv] if where == "before" else [*argv, "--debug"])
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "multiple of 3" in proc.stderr


def test_a_failing_rank_shows_its_traceback_not_ours(tmp_path):
    """A rank that raised is not a usage error: its traceback is the message, exit code 1; the
    parent's own frames (cli.py, launcher's raise) are left out. The rank fails on a checkpoint
    whose tensor data was replaced by zeros *and* re-checksummed — what only a rank can find
    (every other bad input, the metadata included, is refused before launch)."""
    from mgpukit.training.checkpoint_files import latest, read_manifest, write_manifest

    ck = tmp_path / "ck"
    first = _cli(["run", "ddp", "--workers", "2", "--steps", "1", "--no-parity", "--checkpoint-dir", str(ck)])
    assert first.returncode == 0, first.stderr
    step = latest(ck)
    data = step / "__0_0.distcp"
    data.write_bytes(bytes(data.stat().st_size))
    write_manifest(step, {k: v for k, v in read_manifest(step).items() if k not in ("format", "files")})
    proc = _cli(["run", "ddp", "--workers", "2", "--steps", "2", "--no-parity", "--checkpoint-dir", str(ck),
                 "--resume"])
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr[proc.stderr.index("mgpukit: error: "):]
    assert err.startswith("mgpukit: error: rank ") and "Traceback" in err
    assert "mgpukit/cli.py" not in err
