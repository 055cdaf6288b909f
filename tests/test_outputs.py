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
from mgpukit.files import check_output, from_json, to_json, write_text
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
        with pytest.raises(ValueError, match="not writable"):
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
