"""Ctrl-C and SIGTERM stay the caller's after `mgpukit.launch`: torch-elastic's handlers (which
turn SIGINT into an ordinary `Exception`) must not outlive the launch, and an interrupt during a
launch ends it within 2 s with `KeyboardInterrupt`, leaving no worker behind. Real processes:
a child Python runs the launch and receives a real SIGINT."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import mgpukit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _nothing():
    return 1


def test_launch_leaves_the_callers_signal_handlers_installed():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert mgpukit.launch(_nothing, 2, echo=False) == [1, 1]
    assert {s: signal.getsignal(s) for s in before} == before


def _as_from_a_terminal() -> None:
    """Ctrl-C as a terminal delivers it. A test suite started in the background by a
    non-interactive shell (`make test &`, some CI runners) inherits SIGINT *ignored*, and a
    Python started with SIGINT ignored never installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal)


def _wait_for_workers(proc: subprocess.Popen, n: int, limit_s: float = 60) -> list[psutil.Process]:
    """The launch's worker processes, once `n` of them run (the parent may fork helpers too)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        kids = psutil.Process(proc.pid).children(recursive=True)
        if len(kids) >= n:
            time.sleep(1.0)  # let them reach the blocking call
            return psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.1)
    raise AssertionError("the workers never started")


def _interrupt(proc, workers) -> tuple[float, str, str]:
    """SIGINT to `proc`; (seconds until the launch gave up — the child prints "END <monotonic>"
    when the interrupt reached its caller —, stdout, stderr). The interpreter's own shutdown
    afterwards (seconds of torch teardown on a busy machine) is not the launch's and is not
    counted; the workers must be gone within 2 s too."""
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    gone, alive = psutil.wait_procs(workers, timeout=5)
    workers_gone_s = time.monotonic() - start
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "a worker outlived Ctrl-C"
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("SIGINT did not end the process within 30 s")
    ends = [float(line.split()[1]) for line in (out + err).splitlines() if line.startswith("END ")]
    assert ends, (out, err)
    assert workers_gone_s < 2.0, f"workers lived {workers_gone_s:.1f} s after Ctrl-C"
    return ends[0] - start, out, err


SLEEPER = """
import time, mgpukit
def sleep_then_ok():
    time.sleep(120)
try:
    mgpukit.launch(sleep_then_ok, 2, timeout_s=300)
except KeyboardInterrupt:
    print("END", time.monotonic(), flush=True)
    print("KEYBOARD-INTERRUPT")
    raise SystemExit(130)
except Exception as e:
    print("SWALLOWED", type(e).__name__)
    raise SystemExit(3)
"""


def test_ctrl_c_during_a_launch_raises_keyboardinterrupt_within_2s():
    proc = _start(SLEEPER)
    workers = _wait_for_workers(proc, 2)
    elapsed, out, err = _interrupt(proc, workers)
    assert "KEYBOARD-INTERRUPT" in out, (out, err)
    assert proc.returncode == 130
    assert elapsed < 2.0, f"took {elapsed:.1f} s"


BLOCKED_IN_GLOO = """
import time, torch, torch.distributed as dist, mgpukit
def hang():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins: rank 0 sits inside gloo
    time.sleep(120)
try:
    mgpukit.launch(hang, 2, echo=False)
except KeyboardInterrupt:
    print("END", time.monotonic(), flush=True)
    raise
"""


def test_ctrl_c_after_a_first_launch_is_still_keyboardinterrupt():
    """The regression: the second launch ran with elastic's handlers left by the first."""
    proc = _start("""
import time, mgpukit
def quick():
    return 1
mgpukit.launch(quick, 2, echo=False)
try:
    print("FIRST-DONE", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("KEYBOARD-INTERRUPT")
    raise SystemExit(130)
except BaseException as e:
    print("SWALLOWED", type(e).__name__)
    raise SystemExit(3)
""")
    line = proc.stdout.readline()
    assert "FIRST-DONE" in line, (line, proc.stderr.read())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert "KEYBOARD-INTERRUPT" in out, (out, err)
    assert proc.returncode == 130


def test_ctrl_c_ends_a_worker_blocked_inside_a_collective():
    proc = _start(BLOCKED_IN_GLOO)
    workers = _wait_for_workers(proc, 2)
    elapsed, _, err = _interrupt(proc, workers)
    assert "KeyboardInterrupt" in err
    assert "SignalException" not in err
    assert elapsed < 2.0, f"took {elapsed:.1f} s"


def _interrupt_the_cli(argv: list[str]) -> tuple[float, str]:
    """`mgpukit <argv>` in a child, Ctrl-C once its 2 workers run: exit 130 and one last line
    "mgpukit: interrupted" are checked here; returns (seconds, stderr)."""
    proc = _start(f"import sys, time; from mgpukit.cli import main; code = main({argv!r}); "
                  f"print('END', time.monotonic(), flush=True); sys.exit(code)")
    workers = _wait_for_workers(proc, 2)
    elapsed, _, err = _interrupt(proc, workers)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("mgpukit: interrupted"), err
    return elapsed, err


@pytest.mark.parametrize("argv", [["run", "ddp", "--steps", "100000", "--no-parity"]])
def test_ctrl_c_ends_the_cli_with_exit_code_130(argv):
    elapsed, err = _interrupt_the_cli(argv)
    assert "Traceback" not in err
    assert elapsed < 2.0, f"took {elapsed:.1f} s"


def test_ctrl_c_ends_a_tour_writes_what_finished_and_exits_130(tmp_path):
    """Ctrl-C lands during ddp's launch: exit 130 within 2 s, and the report written so far
    says the tour was interrupted (what finished before is kept: tests/test_outputs.py)."""
    argv = ["tour", "--only", "ddp", "--steps", "100000", "--out", str(tmp_path)]
    elapsed, err = _interrupt_the_cli(argv)
    assert elapsed < 2.0, f"took {elapsed:.1f} s"
    assert "INTERRUPTED" in (tmp_path / "index.html").read_text()


def test_interrupting_a_jupyter_kernel_raises_keyboardinterrupt_in_the_cell():
    """Method: a real IPython kernel (jupyter_client) runs a launch twice — the regression was
    the *second* launch, after elastic's handlers stayed installed — and is interrupted the way
    JupyterLab's stop button does it (`interrupt_kernel`, SIGINT to the kernel)."""
    jupyter_client = pytest.importorskip("jupyter_client")
    km, kc = jupyter_client.manager.start_new_kernel(
        kernel_name="python3", env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    try:
        kc.execute_interactive("import time, mgpukit\n"
                               "def sleeper():\n    time.sleep(120)\n", timeout=60)
        for attempt in range(2):
            msg_id = kc.execute("mgpukit.launch(sleeper, 2, timeout_s=300, echo=False)")
            kernel = psutil.Process(km.provisioner.process.pid)
            end = time.monotonic() + 60
            while len(kernel.children(recursive=True)) < 2 and time.monotonic() < end:
                time.sleep(0.1)
            time.sleep(1.0)
            workers = kernel.children(recursive=True)
            assert len(workers) >= 2, "the workers never started"
            start = time.monotonic()
            km.interrupt_kernel()
            reply = kc.get_shell_msg(timeout=30)
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = kc.get_shell_msg(timeout=30)
            elapsed = time.monotonic() - start
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
            assert elapsed < 2.0, f"attempt {attempt}: took {elapsed:.1f} s"
            gone, alive = psutil.wait_procs(workers, timeout=2)
            assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
