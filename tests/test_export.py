"""Exported scripts: up to date with the exporter, and they really run under `torchrun` and
`accelerate launch` with CPU workers forming one gloo group (parity ok, 2 ranks in the record)."""
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mgpukit.export import exportable, script_for

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("name", exportable())
def test_committed_script_is_what_the_exporter_writes(name):
    path = ROOT / "scripts" / f"{name}.py"
    assert path.exists(), f"run `mgpukit export all` to write {path}"
    assert path.read_text() == script_for(name), f"scripts/{name}.py is stale: run `mgpukit export all`"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_ddp_script_runs_under_a_real_launcher(launcher, tmp_path):
    out = tmp_path / "r.json"
    script = str(ROOT / "scripts" / "ddp.py")
    if launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", script]
    else:
        cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
               "--main_process_port", str(_free_port()), script]
    proc = subprocess.run(cmd + ["--steps", "3", "--json", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["world_size"] == 2 and record["parity"]["ok"] is True
