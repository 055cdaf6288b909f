"""A process a worker starts that detaches itself (`setsid -f`: a session and a group of its
own, re-parented to init) does not outlive the launch, nor its parent however it dies
(`mgpukit/runtime/lifeline.py`, 4.: the launch's tag in the environment).

Method: real processes, as in tests/test_lifeline.py. Rank 0 runs `setsid -f sh -c 'echo $$ >
FILE; exec sleep 300'` — the sleep's pid lands in FILE, in a session of its own, its parent
gone — and the sleep must be gone within 5 s of the launch's end, or of the parent's SIGKILL
or SIGTERM (its reaper's work then). Before the tag, it lived on under every signal."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import torch.distributed as dist

import mgpukit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="setsid, /proc: Linux")


def _gone(pids, within_s: float = 5.0) -> list[int]:
    end = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.05)


def start_detached_sleep(path: str) -> None:
    """On rank 0: a `sleep 300` that detaches itself (setsid -f); its pid goes to `path`."""
    if dist.get_rank() == 0:
        subprocess.run(["setsid", "-f", "/bin/sh", "-c", f"echo $$ > {path}.tmp && mv {path}.tmp {path}; "
                        "exec sleep 300"], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < end:
            time.sleep(0.02)
    dist.barrier()


def _detaches_then_returns(path: str) -> int:
    start_detached_sleep(path)
    return os.getpid()


def test_a_detached_descendant_is_gone_when_the_launch_ends(tmp_path):
    path = str(tmp_path / "sleep.pid")
    mgpukit.launch(_detaches_then_returns, 2, path, timeout_s=120, echo=False)
    sleeper = int(open(path).read())
    assert psutil.Process(os.getpid()).pid != sleeper
    assert _gone([sleeper]) == [], "the detached `sleep 300` outlived the launch"


PARENT = """
import os, signal, sys, time, mgpukit
sys.path.insert(0, {tests!r})
from test_detached import start_detached_sleep
def work(path):
    start_detached_sleep(path)
    time.sleep(300)
mgpukit.launch(work, 2, {path!r}, timeout_s=600)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_detached_descendant_dies_with_the_parent(sig, tmp_path):
    path = str(tmp_path / "sleep.pid")
    code = textwrap.dedent(PARENT.format(tests=os.path.join(ROOT, "tests"), path=path))
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ROOT},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic() + 120
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the workers never started"
        time.sleep(0.1)
    sleeper = int(open(path).read())
    assert psutil.Process(sleeper).ppid() != proc.pid  # detached: re-parented away
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _gone([sleeper], within_s=10) == [], f"the detached `sleep 300` outlived the parent's {sig.name}"
