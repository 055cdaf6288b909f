"""Worker failures that explain themselves, on real forked workers: a return value that cannot
be pickled is named with its type; gloo's "collective mismatch" line survives the fault dump
that follows it; a SIGKILLed rank points at the out-of-memory killer; torch's own "Terminating
process" warnings do not leak; mismatched collectives fail within seconds (a collective
timeout, or TORCH_DISTRIBUTED_DEBUG=DETAIL behind `debug_collectives`) instead of hanging."""
import logging
import os
import signal
import threading
import time

import psutil
import pytest
import torch
import torch.distributed as dist

import mgpukit
from mgpukit.config import RunConfig
from mgpukit.prepare import default_collective_timeout
from mgpukit.runtime.failures import explain_output


def _no_children_left():
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def _return_a_lock():
    return {"loss": 1.0, "lock": threading.Lock()}


def test_an_unpicklable_return_value_is_named_with_its_type():
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.launch(_return_a_lock, 2, timeout_s=60, echo=False)
    message = str(info.value)
    assert "return value['lock'] could not be pickled" in message and "_thread.lock" in message
    assert "ended without raising" not in message


def _broadcast_sizes_differ():
    dist.broadcast(torch.ones(2 if dist.get_rank() == 0 else 1), src=0)
    time.sleep(60)


def test_a_collective_size_mismatch_keeps_gloos_explaining_line():
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.launch(_broadcast_sizes_differ, 2, timeout_s=60, echo=False)
    message = str(info.value)
    assert "Is there a distributed collective mismatch in your code?" in message
    assert "_broadcast_sizes_differ" in message  # the user's frame is kept ...
    assert "Extension modules" not in message and "popen_fork" not in message  # ... the noise is not
    assert _no_children_left() == []


def test_a_fault_dump_is_cut_to_what_explains_it():
    text = "\n".join(["noise"] * 50 + [
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        "  what():  Received data size doesn't match expected size.",
        "Fatal Python error: Aborted", "", "Thread 0x1 (most recent call first):",
        '  File "/x/user.py", line 3 in step',
        '  File "/x/mgpukit/runtime/launcher.py", line 9 in _setup_and_call',
        '  File "/y/multiprocessing/process.py", line 108 in run',
        "", "Extension modules: numpy, torch (total: 80)"] + ["x"] * 30)
    lines, _ = explain_output(text, lines=5)
    assert "  what():  Received data size doesn't match expected size." in lines
    assert '  File "/x/user.py", line 3 in step' in lines
    assert not any("launcher.py" in line or "Extension" in line or line == "x" for line in lines)


def _killed_on_rank_1():
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def test_a_sigkilled_rank_mentions_the_out_of_memory_killer():
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.launch(_killed_on_rank_1, 2, timeout_s=60, echo=False)
    assert info.value.rank == 1
    assert "SIGKILL" in str(info.value) and "out-of-memory killer" in str(info.value)


def _raise_on_rank_0():
    if dist.get_rank() == 0:
        raise ValueError("boom")
    time.sleep(60)


def test_torch_terminating_process_warnings_do_not_leak(caplog, capfd):
    with caplog.at_level(logging.WARNING):
        with pytest.raises(mgpukit.WorkerError):
            mgpukit.launch(_raise_on_rank_0, 2, timeout_s=60, echo=False)
    leaked = [r.getMessage() for r in caplog.records if "Terminating process" in r.getMessage()
              or "Closing process" in r.getMessage()]
    assert leaked == []
    assert "Terminating process" not in capfd.readouterr().err


def _rank_1_skips_the_collective():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    time.sleep(120)


def test_a_collective_never_joined_fails_at_the_collective_timeout_naming_it():
    start = time.perf_counter()
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.launch(_rank_1_skips_the_collective, 2, timeout_s=120, collective_timeout_s=3, echo=False)
    assert time.perf_counter() - start < 30
    assert "Timed out waiting" in str(info.value) and "--debug-collectives" in str(info.value)


def _shapes_differ():
    dist.all_reduce(torch.ones(2 if dist.get_rank() == 0 else 1))
    time.sleep(120)


def test_debug_collectives_names_the_mismatch_at_once():
    start = time.perf_counter()
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.launch(_shapes_differ, 2, timeout_s=120, debug_collectives=True, echo=False)
    assert time.perf_counter() - start < 30
    assert "Detected mismatch between collectives" in str(info.value)
    assert "TensorShape=[2]" in str(info.value)


def test_the_default_collective_timeout_is_seconds_for_the_tiny_models():
    assert default_collective_timeout(RunConfig(model="gpt-tiny"), "cpu") <= 60
    assert default_collective_timeout(RunConfig(model="mlp-tiny"), "emulated") <= 60
    assert default_collective_timeout(RunConfig(model="gpt-small"), "cpu") > 60
    assert default_collective_timeout(RunConfig(model="gpt-tiny"), "gpu") >= 300
    assert default_collective_timeout(RunConfig(options={"loader_delay_s": 30}), "cpu") >= 120


class _Store:
    def __init__(self, entries):
        self.entries = entries

    def check(self, keys):
        return all(k in self.entries for k in keys)

    def get(self, key):
        return self.entries[key].encode()


class _Failure:
    def __init__(self, exitcode):
        self.exitcode = exitcode


class _Result:
    def __init__(self, failures):
        self.failures = failures


def test_a_rank_killed_by_a_signal_is_the_root_cause_even_when_torch_noticed_a_peer_first():
    """torch's result keeps only the first failure it noticed; rank 0's error (whatever its
    wording) followed rank 1's SIGKILL, which only the exit codes show."""
    from mgpukit.runtime.failures import ERROR_KEY, worker_error

    store = _Store({ERROR_KEY.format(rank=0): "100\nTraceback ...\nRuntimeError: something odd in gloo"})
    err = worker_error("/nonexistent", _Result({0: _Failure(1)}), store, 2, exitcodes={0: 1, 1: -9})
    assert err.rank == 1 and "SIGKILL" in str(err) and "rank(s) [0] failed after it" in str(err)
    # SIGTERM is what the launch itself sends to the survivors: never a root cause
    err = worker_error("/nonexistent", _Result({0: _Failure(1)}), store, 2, exitcodes={0: 1, 1: -15})
    assert err.rank == 0
