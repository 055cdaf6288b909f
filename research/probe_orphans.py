"""Which mechanism keeps a launch's processes from outliving a parent that dies? (issue 25)

For each mechanism alone and together (`runtime/lifeline.py`), a child Python runs
`mgpukit.launch` on 2 workers; rank 0 starts `sleep 300` through a shell that exits at once
(re-parented away from the worker), rank 1 is optionally stopped (SIGSTOP); the parent is killed
with SIGTERM, SIGKILL or SIGHUP, and the processes still alive 5 s later are counted.

    .venv/bin/python research/probe_orphans.py          # prints a table (about 2-4 minutes)

Mechanisms: "pdeathsig" (prctl(PR_SET_PDEATHSIG, SIGKILL) in each worker), "group" (each worker
in its own process group, killed by group), "reaper" (a /bin/sh that kills the groups when the
parent's pipe closes), "watchdog" (a thread per worker polling getppid() every 0.1 s, then
killing its own group — not shipped: it cannot run in a stopped worker).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import os, signal, subprocess, sys, threading, time
import torch.distributed as dist
import mgpukit
import mgpukit.runtime.launcher as launcher
import mgpukit.runtime.lifeline as lifeline
import mgpukit.runtime.worker as worker

mechanisms, path, stop = sys.argv[1].split("+"), sys.argv[2], sys.argv[3] == "stop"

def arm(parent_pid):
    if "group" in mechanisms:
        os.setpgid(0, 0)
    if "pdeathsig" in mechanisms:
        lifeline._prctl()(lifeline.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if "watchdog" in mechanisms:
        def watch():
            while os.getppid() == parent_pid:
                time.sleep(0.1)
            os.killpg(0, signal.SIGKILL) if "group" in mechanisms else os._exit(1)
        threading.Thread(target=watch, daemon=True).start()

class NoReaper:
    def __init__(self, pids): pass
    def disarm(self): pass

worker.die_with_parent = arm
if "group" not in mechanisms:
    launcher.own_group = lambda pid: None
if "reaper" not in mechanisms:
    launcher.Reaper = NoReaper

def work():
    if dist.get_rank() == 0:
        out = subprocess.run(["/bin/sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True).stdout.strip()
        open(path + ".sleep", "w").write(out)
    open(path + f".rank{dist.get_rank()}", "w").write(str(os.getpid()))
    if stop and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(300)

mgpukit.launch(work, 2, timeout_s=600, echo=False)
"""


def alive(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def trial(mechanisms: str, sig: signal.Signals, stop: bool) -> tuple[int, int]:
    """(workers alive, sleeps alive) 5 s after the parent died; everything is cleaned up after."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p")
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), mechanisms, path,
                                 "stop" if stop else "run"], env={**os.environ, "PYTHONPATH": ROOT},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        names = [path + s for s in (".rank0", ".rank1", ".sleep")]
        end = time.monotonic() + 120
        while not all(os.path.exists(n) and open(n).read() for n in names):
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"{mechanisms}: the workers never started")
            time.sleep(0.1)
        time.sleep(0.5)
        workers, sleeper = [int(open(n).read()) for n in names[:2]], int(open(names[2]).read())
        proc.send_signal(sig)
        proc.wait()
        time.sleep(5)
        left_workers, left_sleep = alive(workers), alive([sleeper])
        for pid in left_workers + left_sleep:  # ours: end them now
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(left_workers), len(left_sleep)


def main():
    rows = ["none", "pdeathsig", "group", "group+reaper", "group+watchdog", "pdeathsig+group+reaper"]
    print(f"{'mechanisms':<24} {'signal':<8} {'rank 1':<8} workers left / 2   sleep left / 1")
    for mechanisms in rows:
        for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGHUP):
            for stop in (False, True):
                w, s = trial(mechanisms, sig, stop)
                print(f"{mechanisms:<24} {sig.name:<8} {'stopped' if stop else 'running':<8} "
                      f"{w:>14}   {s:>14}", flush=True)


if __name__ == "__main__":
    main()
