"""The thread policy: workers' OpenMP threads wait passively, and a run says how it was timed.

Method: the policy in effect is *measured* (`threads.spin_ms`: CPU burnt while the process sleeps
right after a parallel region — spinning OpenMP burns milliseconds, passive ~0), inside a forked
worker, in fresh interpreters that import mgpukit before or after torch. Before this policy the
worker spun (OMP_WAIT_POLICY is read by libgomp once, when torch loads it).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mgpukit.threads import SPIN_THRESHOLD_MS


def _fresh(code: str, env_extra: dict | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


_WORKER_SPIN = """
import mgpukit
from mgpukit.threads import spin_ms
import torch
def probe():
    return torch.get_num_threads(), spin_ms(threads=2)
print(repr(mgpukit.launch(probe, 1, mode="cpu", threads_per_worker=2, echo=False)[0]))
"""


def test_a_forked_worker_waits_passively_when_mgpukit_comes_first():
    threads, spin = eval(_fresh(_WORKER_SPIN))
    assert threads == 2
    assert spin < SPIN_THRESHOLD_MS, f"the worker's OpenMP burnt {spin:.2f} ms while idle"


def test_the_probe_sees_spinning_when_the_environment_asks_for_it():
    """The test of the test: OMP_WAIT_POLICY=ACTIVE, chosen before import, spins in the worker."""
    _, spin = eval(_fresh(_WORKER_SPIN, {"OMP_WAIT_POLICY": "ACTIVE"}))
    assert spin > SPIN_THRESHOLD_MS


def test_torch_first_gives_one_thread_per_worker_and_the_record_says_why():
    code = """
import torch
import mgpukit
threads = mgpukit.launch(torch.get_num_threads, 1, mode="cpu", echo=False)[0]
rec = mgpukit.run("single", workers=1, mode="cpu", steps=2)
print(repr((threads, rec["threads"])))
"""
    threads, pol = eval(_fresh(code))
    assert threads == 1 and pol["per_worker"] == 1
    assert pol["omp_waits"] == "spin" and "measured" in pol["known_from"]
    assert "import mgpukit before torch" in pol["note"].lower()


def test_the_record_names_threads_and_policy_and_the_reference_uses_the_same_threads():
    from mgpukit import experiment

    rec = experiment.run("ddp", workers=1, mode="cpu", steps=3, threads_per_worker=2)
    assert rec["threads"]["per_worker"] == 2
    assert rec["threads"]["omp_waits"] == "passive"
    ref = experiment.reference("single", experiment.prepare("ddp", workers=1, steps=3).cfg, threads=2)
    assert ref["record"]["threads"]["per_worker"] == 2  # like with like: one worker's threads
    assert rec["parity"]["ok"]
    s = rec["step_time"]
    assert s["n"] == 2 and s["skipped"] == 1 and s["p25_s"] <= s["median_s"] <= s["p75_s"]


@pytest.mark.parametrize("requested, expected", [(3, 3), (1, 1)])
def test_a_requested_thread_count_wins(requested, expected):
    from mgpukit.threads import worker_threads

    assert worker_threads(2, requested, cores=2) == (expected, None)
