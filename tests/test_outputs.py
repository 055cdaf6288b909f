"""Results are not lost: every output path is checked before anything trains, files are
written whole or not at all (temp file + rename), `export` does not overwrite a user's file,
and a tour writes what finished even when a later part fails or it is interrupted."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from mgpukit.cli import main
from mgpukit.files import check_output, write_text
from mgpukit.strict_json import from_json, to_json
from mgpukit.runtime import launcher

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def no_launch(monkeypatch):
    """Any launch fails the test: the error had to come before it."""
    def launched(*a, **k):
        raise AssertionError("a launch started: the bad path was not checked first")
    monkeypatch.setattr(launcher, "_run", launched)


def _one_line_error(capsys, argv) -> str:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own checks exit from inside the parser
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mgpukit: error: "), err
    return lines[0]


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "plain-file"
    f.write_text("x")
    return f


@pytest.mark.parametrize("flag", ["--json", "--trace", "--save-weights"])
def test_run_checks_each_output_file_before_launching(flag, a_file, capsys, no_launch):
    line = _one_line_error(capsys, ["run", "ddp", "--steps", "1", flag, f"{a_file}/out.json"])
    assert "is a file, not a directory" in line and str(a_file) in line


def test_run_refuses_a_directory_where_a_file_goes(tmp_path, capsys, no_launch):
    line = _one_line_error(capsys, ["run", "ddp", "--json", str(tmp_path)])
    assert "is a directory" in line


def test_profile_torch_must_be_a_folder(a_file, capsys, no_launch):
    line = _one_line_error(capsys, ["run", "ddp", "--profile-torch", str(a_file)])
    assert "not a directory" in line


def test_plan_json_bench_json_and_calibrate_out_are_checked_first(a_file, capsys, no_launch):
    assert "plan-json" not in str(a_file)
    for argv in (["plan", "--json", f"{a_file}/p.json"], ["bench", "launch", "--json", f"{a_file}/b.json"],
                 ["calibrate", "--out", f"{a_file}/m.toml"]):
        assert "is a file, not a directory" in _one_line_error(capsys, argv)


def test_export_refuses_to_overwrite_a_different_file_without_force(tmp_path, capsys):
    target = tmp_path / "mine.py"
    target.write_text("# my edited script\n")
    line = _one_line_error(capsys, ["export", "ddp", "--out", str(target)])
    assert "already exists" in line and "--force" in line
    assert target.read_text() == "# my edited script\n"
    assert main(["export", "ddp", "--out", str(target), "--force"]) == 0
    assert "mgpukit" in target.read_text()
    assert main(["export", "ddp", "--out", str(target)]) == 0  # same content: nothing to refuse


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    """Method: a child process limited to 64 KiB per file (RLIMIT_FSIZE, SIGXFSZ ignored, so
    the write fails with EFBIG like a full disk) saves a big record over a good one."""
    good = tmp_path / "record.json"
    good.write_text(json.dumps({"strategy": "good"}))
    code = textwrap.dedent(f"""
        import resource, signal
        from mgpukit.measure.record import save_record
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        try:
            save_record({{"strategy": "big", "losses": [0.5] * 100000}}, {str(good)!r})
        except OSError as e:
            print("FAILED", e.errno)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert "FAILED" in proc.stdout, proc.stderr
    assert json.loads(good.read_text()) == {"strategy": "good"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"], "a temp file was left"


def test_records_are_strict_json_with_non_finite_numbers_spelled_out(tmp_path):
    record = {"losses": [1.0, float("nan")], "parity": {"max_abs_diff": float("inf")}, "x": -float("inf")}
    text = to_json(record)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} token in the JSON"))
    back = from_json(text)
    assert back["losses"][0] == 1.0 and back["losses"][1] != back["losses"][1]
    assert back["parity"]["max_abs_diff"] == float("inf") and back["x"] == -float("inf")
    path = write_text(tmp_path / "r.json", text)
    assert from_json(path.read_text())["parity"]["max_abs_diff"] == float("inf")


def test_check_output_names_the_path_and_the_fix(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root)")
        with pytest.raises(ValueError, match="does not take new files"):
            check_output(ro / "x.json")
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("argv, cause", [
    (["tour", "--emulate", "nope"], "unknown hardware profile 'nope'"),
    (["tour", "--only", "dpp"], "--only dpp: not a registered strategy"),
    (["tour", "--out", "{file}"], "is not a directory"),
    (["tour", "--update-readme", "{missing}"], "no such file"),
    (["tour", "--workers", "0"], "must be at least 1"),
])
def test_tour_checks_its_arguments_before_the_first_run(argv, cause, a_file, tmp_path, capsys, no_launch):
    argv = [a.format(file=a_file, missing=tmp_path / "nope.md") for a in argv]
    assert cause in _one_line_error(capsys, argv)


def test_a_tour_writes_what_finished_when_the_end_fails(tmp_path, monkeypatch):
    from mgpukit import tour

    def broken(*a, **k):
        raise ValueError("figure exploded")
    monkeypatch.setattr(tour, "_extra_figures", broken)
    out = tour.run_tour(workers=1, steps=2, out=tmp_path, only={"single"}, emulated_workers=(),
                        progress=False)
    assert [r["strategy"] for r in json.loads((tmp_path / "records.json").read_text())] == ["single"]
    assert "figure exploded" in (tmp_path / "index.html").read_text()
    assert out["records"]


def test_an_interrupted_tour_writes_what_finished_and_reraises(tmp_path, monkeypatch):
    from mgpukit import tour

    real, calls = tour.run, []

    def run_then_interrupt(name, **kw):
        calls.append(name)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(name, **kw)
    monkeypatch.setattr(tour, "run", run_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        tour.run_tour(workers=1, steps=2, out=tmp_path, only={"single"}, emulated_workers=(1,),
                      progress=False)
    assert [r["strategy"] for r in json.loads((tmp_path / "records.json").read_text())] == ["single"]
    assert "INTERRUPTED" in (tmp_path / "index.html").read_text()


def test_a_tour_where_every_run_failed_still_writes_its_report(tmp_path, monkeypatch, no_launch):
    from mgpukit import tour

    def fails(name, **kw):
        raise ValueError(f"{name} broke")
    monkeypatch.setattr(tour, "run", fails)
    out = tour.run_tour(workers=1, steps=2, out=tmp_path, only={"single"}, emulated_workers=(),
                        progress=False)
    assert json.loads((tmp_path / "records.json").read_text()) == []
    assert "single broke" in (tmp_path / "index.html").read_text()
    assert [f["strategy"] for f in out["failures"]] == ["single"]


# ---- round two (issue 25): the path is tried, every output is atomic, a failure loses nothing

def _limited(argv, limit_bytes, cwd):
    """`mgpukit <argv>` in a child whose files may not grow past `limit_bytes` (RLIMIT_FSIZE,
    the kernel's `ulimit -f`: past it a write fails with EFBIG, or SIGXFSZ kills the writer)."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return subprocess.run([sys.executable, "-m", "mgpukit.cli", *argv], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": ROOT}, timeout=300, preexec_fn=limit)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")
def test_a_json_path_in_proc_is_refused_before_training(capsys, no_launch):
    """`os.access` says /proc is writable for root; creating a file there is what fails."""
    line = _one_line_error(capsys, ["run", "single", "--steps", "1", "--json", "/proc/x.json"])
    assert "/proc/x.json" in line and "does not take new files" in line


def test_a_failed_trace_keeps_the_record_and_says_what_was_written(tmp_path, capsys, monkeypatch):
    """A full disk for the trace (its writer raises ENOSPC): exit 2, one line naming the trace
    and the cause, the record written all the same, the run's summary shown."""
    import errno
    from mgpukit import experiment

    def full_disk(record, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(experiment, "save_chrome_trace", full_disk)
    record, trace = tmp_path / "r.json", tmp_path / "t.json"
    line = _one_line_error(capsys, ["run", "single", "--steps", "2", "--json", str(record),
                                    "--trace", str(trace)])
    assert str(trace) in line and "No space left on device" in line and str(record) in line, line
    assert from_json(record.read_text())["strategy"] == "single"
    assert not trace.exists()


def test_profile_traces_on_a_full_file_system_fail_in_one_line_keeping_the_record(tmp_path):
    """torch.profiler's writer (kineto) only logs a failed write and leaves `<file>.tmp`: under
    a 200 KB file-size limit the small record fits, the traces do not."""
    prof, record = tmp_path / "prof", tmp_path / "r.json"
    proc = _limited(["run", "single", "--steps", "2", "--profile-torch", str(prof), "--json", str(record)],
                    200_000, tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[-1].startswith("mgpukit: error: cannot write rank 0's torch.profiler trace"), proc.stderr
    assert "file-size limit" in lines[-1] and str(record) in lines[-1]
    assert "Traceback" not in proc.stderr
    assert from_json(record.read_text())["strategy"] == "single"
    assert sorted(p.name for p in prof.iterdir()) == [], "a partial trace or a .tmp was left"


@pytest.mark.parametrize("argv", [["plan", "--json", "{out}"], ["export", "ddp", "--out", "{out}", "--force"]],
                         ids=["plan-json", "export"])
def test_plan_and_export_under_ulimit_f_leave_the_old_file_and_no_partial(argv, tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    proc = _limited([a.format(out=out) for a in argv], 1024, tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("mgpukit: error: cannot write") and str(out) in lines[0], lines
    assert "file-size limit" in lines[0]
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"], "a temp file was left"


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: a real full disk (ENOSPC). Needs root and mount(8); skipped elsewhere."""
    where = tmp_path / "tiny"
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_leaves_the_old_file_whole_and_no_partial(tiny_disk):
    from mgpukit.files import OutputError, write_text

    old = tiny_disk / "record.json"
    old.write_text('{"strategy": "good"}')
    with pytest.raises(OutputError) as info:
        write_text(old, "x" * 200_000, what="record")
    assert str(old) in str(info.value) and "No space left on device" in str(info.value)
    assert old.read_text() == '{"strategy": "good"}'
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["record.json"]
