"""The exported scripts: up to date with the exporter, and each really runs under `torchrun` and
`accelerate launch` with CPU workers forming one gloo group. The loop scripts
(`scripts/train_ddp.py`, `scripts/train_pp_1f1b.py`) show the training loop and check parity
themselves; the runner (`scripts/train.py`) runs every strategy through the kit's trainer, judged
exactly as `mgpukit run` judges it (its parity check, 2 ranks in the record)."""
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mgpukit.export import default_out, exportable, runner_script, script_for

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = str(ROOT / "scripts" / "train.py")


def test_committed_script_is_what_the_exporter_writes():
    path = ROOT / "scripts" / "train.py"
    assert path.read_text() == runner_script("ddp"), "scripts/train.py is stale: run `mgpukit export --runner --force`"
    for name in ("ddp", "pp-1f1b"):
        loop = ROOT / default_out(name)
        assert loop.read_text() == script_for(name), f"{loop} is stale: run `mgpukit export {name} --force`"


@pytest.mark.parametrize("name", ["ddp", "pp-1f1b"])
def test_the_loop_script_shows_the_loop_in_order(name):
    """The program a learner takes to a cluster: forward and backward (a pipeline's schedule
    step, or a replica's micro-batch loop with `loss.backward()` itself), the gradient sync, the
    optimizer step and the log, in that order, in the script itself — not behind the kit's
    trainer, and no Recorder in the loop."""
    text = script_for(name)
    body = text[text.index("def training_function"):text.index("def print_loss")]
    loop = body[body.index("for step in range(cfg.steps):"):body.index("return gather_weights")]
    order = ["for step in range(cfg.steps):", "parts.engine.forward_backward(x, y)", "parts.loss_of(xm, ym)",
             "loss.backward()", "parts.sync.sync(step)",
             "optimizer.step()", "parts.after_step(step)", "print_loss("]
    assert [body.index(line) for line in order] == sorted(body.index(line) for line in order)
    assert not re.search(r"\brec\b", loop)  # timing and bytes stay outside the loop
    assert "launched" not in text and "training.trainer import train" not in text
    assert len(body.splitlines()) <= 40  # the whole training function reads in one screen


def _run_loop(launcher, nproc, script, args, cwd):
    if launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(nproc), str(script)]
    else:
        cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(nproc),
               "--main_process_port", str(_free_port()), str(script)]
    return subprocess.run(cmd + args, capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.mark.parametrize("launcher, name, nproc, args", [
    ("torchrun", "ddp", 2, []),
    ("accelerate", "pp-1f1b", 4, ["--dp", "2", "--pp", "2", "--micro-batches", "2"]),
])
def test_the_loop_script_trains_with_parity_under_both_launchers(launcher, name, nproc, args, tmp_path):
    proc = _run_loop(launcher, nproc, ROOT / default_out(name), ["--steps", "3", *args], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "parity ok: after 3 steps" in proc.stdout
    assert len([line for line in proc.stdout.splitlines() if line.startswith("step ")]) == 6  # run + reference


def test_the_loop_script_without_its_gradient_sync_fails_parity(tmp_path):
    """The test of the test: a learner who deletes the sync line of `mgpukit export dp-naive`
    (the all-reduce after backward; torch's DDP does it inside backward) trains two models."""
    broken = tmp_path / "train_naive_nosync.py"
    text = script_for("dp-naive")
    assert "        parts.sync.sync(step)" in text
    broken.write_text(text.replace("        parts.sync.sync(step)", "        pass"))
    proc = _run_loop("torchrun", 2, broken, ["--steps", "3"], tmp_path)
    assert proc.returncode == 1 and "parity FAILED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_layout_the_loop_script_cannot_run_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / default_out("pp-1f1b")), "--pp", "3"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "error:" in proc.stderr


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


# Each launcher once and each strategy once (the launcher decides how the nodes are found, the
# strategy which collectives cross them; neither depends on the other): torchrun with dp x pp,
# which also checks the record's layout, accelerate with ddp. torchrun with ddp on two nodes is
# run again, resumed after a kill, by the test of --max-restarts below.
@pytest.mark.parametrize("launcher, strategy, layout", [
    ("torchrun", "pp-1f1b", ["--dp", "2", "--pp", "2"]),
    ("accelerate", "ddp", []),
])
def test_two_nodes_on_loopback_train_with_parity_and_the_record_names_the_nodes(launcher, strategy,
                                                                                layout, tmp_path):
    out = tmp_path / "r.json"  # both nodes are told; global rank 0 writes it
    codes, logs = _two_nodes(launcher, ["--strategy", strategy, *layout, "--steps", "2",
                                        "--json", str(out)], tmp_path)
    assert codes == [0, 0], "\n----\n".join(log[-3000:] for log in logs)
    record = json.loads(out.read_text())
    assert record["world_size"] == 4 and record["parity"]["ok"] is True
    assert record["nodes"]["count"] == 2 and record["nodes"]["of_rank"] == [0, 0, 1, 1]
    if layout:  # dp x pp from the command line, as the record says it ran
        assert record["layout"]["dp"] == 2 and record["layout"]["pp"] == 2
    comm = [e for e in record["timeline"] if e["stream"] == "comm"]
    crossing = {(e["kind"], bool(e.get("inter_node"))) for e in comm}
    if strategy == "ddp":  # dp=4 over 2 nodes: every gradient all-reduce crosses
        assert crossing == {("all_reduce", True)}
    else:  # (pp, dp, tp) order: pp crosses nodes, the dp all-reduces stay inside each node
        assert ("send", True) in crossing and ("recv", True) in crossing
        assert all(not e.get("inter_node") for e in comm if e["kind"] == "all_reduce")


# ---- Slurm: one torchrun per node, rendezvous on the allocation's first node

SBATCH = ROOT / "scripts" / "slurm" / "train.sbatch"


def test_slurm_script_parses_and_renders_one_torchrun_per_node(tmp_path):
    """`bash -n`, then a dry run with a fake allocation (SLURM_* and a stub `scontrol` that
    expands the node list): the printed line is what every node's srun task runs."""
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    stub = tmp_path / "scontrol"
    stub.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a17\\ngpu-a18\\ngpu-a19\\n"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "DRY_RUN": "1", "SLURM_JOB_NODELIST": "gpu-a[17-19]",
           "SLURM_NNODES": "3", "SLURM_JOB_ID": "42", "SLURM_GPUS_ON_NODE": "4",
           "SLURM_SUBMIT_DIR": "/home/me/mgpukit", "MAX_RESTARTS": "2"}
    proc = subprocess.run(["bash", str(SBATCH), "--strategy", "pp-1f1b", "--pp", "3", "--dp", "4"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1].split()
    srun, torchrun = line[:line.index("torchrun")], line[line.index("torchrun"):]
    assert srun[0] == "srun" and "--ntasks-per-node" in srun and srun[srun.index("--ntasks-per-node") + 1] == "1"
    flags = dict(zip(torchrun[1:13:2], torchrun[2:13:2]))
    assert flags == {"--nnodes": "3", "--nproc-per-node": "4", "--rdzv-id": "42", "--rdzv-backend": "c10d",
                     "--rdzv-endpoint": "gpu-a17:29500", "--max-restarts": "2"}
    assert torchrun[13:] == ["/home/me/mgpukit/scripts/train.py", "--strategy", "pp-1f1b", "--pp", "3", "--dp", "4"]
    # outside an allocation it says so instead of starting anything
    bare = subprocess.run(["bash", str(SBATCH)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert bare.returncode != 0 and "sbatch" in bare.stderr


# ---- a process killed on node 1: node 0 ends too, naming it; --max-restarts resumes

def _kill_a_node1_worker_once_training(procs, ckpt, timeout=240):
    """SIGKILL node 1's second process (global rank 3) once step 1's checkpoint exists, i.e.
    in the middle of training. Returns the moment of the kill and which launcher is node 1
    (c10d numbers the nodes in the order they join: `--node-rank` is only a hint)."""
    import os
    import signal
    import time

    import psutil

    deadline = time.time() + timeout
    while not (ckpt / "latest").is_file():
        assert time.time() < deadline and all(p.poll() is None for p in procs), "never started training"
        time.sleep(0.2)
    for i, agent in enumerate(procs):
        for worker in psutil.Process(agent.pid).children():
            env = worker.environ()
            if env.get("GROUP_RANK") == "1" and env.get("LOCAL_RANK") == "1":
                os.kill(worker.pid, signal.SIGKILL)
                return time.time(), i
    raise AssertionError("no worker of node 1 found")


def _two_nodes_with_a_kill(tmp_path, *launcher_flags, steps=12):
    """Start ddp on two loopback nodes with a checkpoint every step, SIGKILL rank 3 once
    training is under way; returns the two launchers (node 0's first), their logs and how long
    the job went on after the kill."""
    import time

    ckpt, port = tmp_path / "ck", _free_port()
    args = ["--strategy", "ddp", "--steps", str(steps), "-o", "loader_delay_s=0.3",
            "-o", f"checkpoint_dir={ckpt}", "-o", "checkpoint_every=1", "--json", str(tmp_path / "r.json")]
    # the first node serves the rendezvous store: both "nodes" are this host, so say which
    cmds = [c[:-1] + ["--rdzv-conf", f"is_host={int(r == 0)}", *launcher_flags, c[-1]] + args
            for r, c in enumerate(_node_command("torchrun", r, port) for r in (0, 1))]
    procs = [subprocess.Popen(c, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for c in cmds]
    try:
        killed_at, node1 = _kill_a_node1_worker_once_training(procs, ckpt)
        try:  # within pytest's 300 s, so that a hang fails with both nodes' logs, not a bare timeout
            logs = [p.communicate(timeout=max(1.0, 200 - (time.time() - killed_at)))[0] for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            tails = [p.communicate()[0][-3000:] for p in procs]
            raise AssertionError("the job did not end within 200 s of the kill:\n" + "\n----\n".join(tails))
        ended_after = time.time() - killed_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [procs[1 - node1], procs[node1]], [logs[1 - node1], logs[node1]], ended_after


def test_a_process_killed_on_node_1_ends_node_0_with_a_message_naming_it(tmp_path):
    """Node 1's torchrun reports its rank 3 SIGKILLed; node 0's processes lose their peers and
    end, naming the ranks and the node that went silent (`runtime/peers.py`), not just gloo's
    "Connection closed by peer [127.0.0.1]:PORT"."""
    procs, logs, ended_after = _two_nodes_with_a_kill(tmp_path)
    assert procs[0].returncode != 0 and procs[1].returncode != 0
    # whichever survivor on node 0 noticed first (its launcher then ends the other one)
    lost = re.search(r"PeerLostError: rank [01] \(node 0\) lost its connection to a peer\..*", logs[0])
    assert lost and "rank 3 on node 1" in lost.group(0), logs[0][-3000:]
    assert "rank      : 3 (local_rank: 1)" in logs[1] and "SIGKILL" in logs[1], logs[1][-3000:]
    assert ended_after < 120
    assert not (tmp_path / "r.json").exists()


def test_max_restarts_on_two_nodes_resumes_from_the_checkpoint_and_matches_one_process(tmp_path):
    """The same kill under `torchrun --max-restarts 1` on both nodes: the agents start every
    worker again, the new process group meets afresh (`launched.open_group_for_this_attempt`:
    torchrun keeps its store across attempts, so gloo would read the dead workers' addresses),
    the run resumes from the last checkpoint, and the finished record matches single-process
    training at fp32 tolerances over all 8 steps."""
    procs, logs, _ = _two_nodes_with_a_kill(tmp_path, "--max-restarts", "1", steps=8)
    assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(log[-3000:] for log in logs)
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["resumed_from_step"] >= 1 and len(record["losses"]) == 8
    assert record["parity"]["ok"] is True and record["nodes"]["count"] == 2
