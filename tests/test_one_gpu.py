"""One GPU, as most learners have: what `auto` and `mgpukit info` do with it (no GPU here:
the count is patched; the CUDA path itself is checked on a GPU by `make test-gpu`).

1-worker runs go to the GPU; more workers than GPUs go to CPU workers with the reason said (in
`mgpukit info` and in each record's `placement`) —
NCCL refuses two ranks on one GPU ("Duplicate GPU detected", measured on an H200:
shared/FACTS.md); `mode="gpu"` with too few GPUs is refused in one line.
"""
from __future__ import annotations

import pytest

from mgpukit.cli import main
from mgpukit.runtime import hardware, modes
from mgpukit.runtime.launcher import LaunchError, resolve_mode


@pytest.fixture
def one_gpu(monkeypatch):
    for module in (hardware, modes):  # modes: where `resolve_mode` counts them
        monkeypatch.setattr(module, "cuda_device_count", lambda: 1)


def test_auto_puts_one_worker_on_the_gpu_and_more_on_cpu_workers_saying_why(one_gpu):
    assert resolve_mode("auto", 1) == "gpu"
    assert resolve_mode("auto", 2) == "cpu"
    assert "NCCL refuses two ranks on one GPU" in hardware.placement(2)[1]
    with pytest.raises(LaunchError, match="NCCL refuses two ranks on one GPU"):
        resolve_mode("gpu", 2)


def test_info_says_what_runs_where_on_one_gpu(one_gpu, capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "1 worker (and its single-process reference): one rank per GPU, CUDA + NCCL" in out
    assert "2+ workers (the multi-worker lessons): CPU workers with gloo" in out
    assert "Duplicate GPU detected" in out


def test_without_a_gpu_everything_is_cpu_workers(monkeypatch):
    monkeypatch.setattr(hardware, "cuda_device_count", lambda: 0)
    assert hardware.placement(4) == ("cpu", "4 CPU worker(s) with gloo (no GPU)")
    assert hardware.placement_lines()[0].startswith("every run: CPU workers")
    assert hardware.placement(2, gpus=8)[0] == "gpu"
