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


# ---- two "nodes" on loopback: two launchers started at once, one rendezvous on 127.0.0.1

def _node_command(launcher, node_rank, port):
    """What one node runs: torchrun with a c10d rendezvous, or accelerate launch with the
    machine flags. Each node starts 2 processes; 4 in all."""
    if launcher == "torchrun":
        return [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--node-rank", str(node_rank), SCRIPT]
    return [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_machines", "2",
            "--machine_rank", str(node_rank), "--main_process_ip", "127.0.0.1",
            "--main_process_port", str(port), "--num_processes", "4", SCRIPT]


def _two_nodes(launcher, args, cwd, timeout=300):
    port = _free_port()
    procs = [subprocess.Popen(_node_command(launcher, r, port) + args, cwd=cwd, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [p.returncode for p in procs], outs


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
@pytest.mark.parametrize("strategy, layout", [("ddp", []), ("pp-1f1b", ["--dp", "2", "--pp", "2"])])
def test_two_nodes_on_loopback_train_with_parity_and_the_record_names_the_nodes(launcher, strategy,
                                                                                layout, tmp_path):
    out = tmp_path / "r.json"  # both nodes are told; global rank 0 writes it
    codes, logs = _two_nodes(launcher, ["--strategy", strategy, *layout, "--steps", "2",
                                        "--json", str(out)], tmp_path)
    assert codes == [0, 0], "\n----\n".join(log[-3000:] for log in logs)
    record = json.loads(out.read_text())
    assert record["world_size"] == 4 and record["parity"]["ok"] is True
    assert record["nodes"]["count"] == 2 and record["nodes"]["of_rank"] == [0, 0, 1, 1]
    comm = [e for e in record["timeline"] if e["stream"] == "comm"]
    crossing = {(e["kind"], bool(e.get("inter_node"))) for e in comm}
    if strategy == "ddp":  # dp=4 over 2 nodes: every gradient all-reduce crosses
        assert crossing == {("all_reduce", True)}
    else:  # (pp, dp, tp) order: pp crosses nodes, the dp all-reduces stay inside each node
        assert ("send", True) in crossing and ("recv", True) in crossing
        assert all(not e.get("inter_node") for e in comm if e["kind"] == "all_reduce")
