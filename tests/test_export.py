"""The exported script: up to date with the exporter, and every strategy really runs through it
under `torchrun` and `accelerate launch` with CPU workers forming one gloo group, judged exactly
as `mgpukit run` judges it (its parity check, 2 ranks in the record)."""
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mgpukit.export import exportable, script_for

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = str(ROOT / "scripts" / "train.py")


def test_committed_script_is_what_the_exporter_writes():
    path = ROOT / "scripts" / "train.py"
    assert path.read_text() == script_for("ddp"), "scripts/train.py is stale: run `mgpukit export --force`"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(launcher, nproc, args, cwd):
    if launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(nproc), SCRIPT]
    else:
        cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(nproc),
               "--main_process_port", str(_free_port()), SCRIPT]
    return subprocess.run(cmd + args, capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_every_strategy_runs_under_a_real_launcher_with_parity(launcher, tmp_path):
    proc = _launch(launcher, 2, ["--strategy", "all", "--steps", "3"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split()[0] for line in proc.stdout.splitlines()
            if line.split() and line.split()[0] in exportable()]
    assert sorted(rows) == exportable()
    assert "FAIL" not in proc.stdout


def test_dp_times_pp_runs_under_torchrun_and_writes_its_record(tmp_path):
    out = tmp_path / "r.json"
    proc = _launch("torchrun", 4, ["--strategy", "pp-1f1b", "--dp", "2", "--pp", "2", "--steps", "3",
                                   "--json", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["world_size"] == 4 and record["parity"]["ok"] is True
    assert record["layout"]["dp"] == 2 and record["layout"]["pp"] == 2
