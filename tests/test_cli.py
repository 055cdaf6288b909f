"""The `mgpukit` command line, run in-process and as a real console script."""
import json
import subprocess
import sys

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
