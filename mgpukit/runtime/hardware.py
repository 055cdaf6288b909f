"""What this machine has: cores, GPUs, versions — read without initialising CUDA.

The parent process must not initialise CUDA before it forks workers, so GPU queries here go
through NVML (`PYTORCH_NVML_BASED_CUDA_CHECK=1`), the same way Accelerate's launcher does.
"""
from __future__ import annotations

import os
import platform
from contextlib import contextmanager
from pathlib import Path

import psutil
import torch


@contextmanager
def _nvml_check():
    old = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = old


def cuda_device_count() -> int:
    """GPUs visible to this process, counted without creating a CUDA context."""
    if not torch.backends.cuda.is_built():
        return 0
    with _nvml_check():
        return torch.cuda.device_count() if torch.cuda.is_available() else 0


def usable_cores() -> int:
    """Physical cores this process may run on (affinity respected)."""
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    physical = psutil.cpu_count(logical=False) or logical
    return max(1, min(logical, physical))


def gpu_info() -> list[dict]:
    """Name and memory of each visible GPU, via NVML when available (no CUDA context)."""
    n = cuda_device_count()
    if n == 0:
        return []
    try:
        import pynvml  # ships with torch's CUDA builds as nvidia-ml-py

        pynvml.nvmlInit()
        out = []
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            out.append({"index": i, "name": name if isinstance(name, str) else name.decode(),
                        "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total)})
        return out
    except Exception:  # no NVML bindings: report what we can without touching CUDA
        return [{"index": i, "name": "cuda", "memory_bytes": None} for i in range(n)]


NCCL_ONE_RANK_PER_GPU = ("NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\"), so "
                         "more ranks than GPUs run as CPU workers with gloo")


def placement(workers: int, gpus: int | None = None) -> tuple[str, str]:
    """Where mode "auto" runs `workers` ranks — "gpu" or "cpu" — and why, in words.

    One rank per GPU with NCCL when there are enough GPUs; otherwise CPU workers with gloo (on a
    1-GPU machine: every multi-worker lesson), since NCCL will not put two ranks on one GPU.
    The single-process reference a run is checked against runs where the run ran."""
    gpus = cuda_device_count() if gpus is None else gpus
    if gpus >= workers:
        return "gpu", f"{workers} rank(s) on {workers} of {gpus} GPU(s) (CUDA, NCCL)"
    if gpus == 0:
        return "cpu", f"{workers} CPU worker(s) with gloo (no GPU)"
    return "cpu", (f"{workers} CPU workers with gloo, not the {gpus} GPU(s): {NCCL_ONE_RANK_PER_GPU}; "
                   f"for GPU timings of {workers} GPUs, emulate them (--emulate h100-nvlink)")


def placement_lines(gpus: int | None = None) -> list[str]:
    """What runs where on this machine (`mgpukit info`)."""
    gpus = cuda_device_count() if gpus is None else gpus
    if gpus == 0:
        return ["every run: CPU workers with gloo, measured on this CPU "
                "(GPU timings: --emulate PROFILE)"]
    many = f"1–{gpus} workers" if gpus > 1 else "1 worker"
    return [f"{many} (and its single-process reference): one rank per GPU, CUDA + NCCL, measured",
            f"{gpus + 1}+ workers (the multi-worker lessons): CPU workers with gloo — "
            f"{NCCL_ONE_RANK_PER_GPU.split(', so')[0]}; or emulated GPUs (--emulate h100-nvlink)"]


def default_mode() -> str:
    return "gpu" if cuda_device_count() >= 2 else "cpu"


def default_workers() -> int:
    """Workers the tour uses: every GPU, or 2 CPU workers (enough to show communication)."""
    n = cuda_device_count()
    return n if n >= 2 else 2


def cpu_name() -> str:
    """The CPU's model name (Linux reads it from /proc/cpuinfo), else its architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def env_info() -> dict:
    """The `env` block of every result record."""
    # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
    import accelerate

    return {
        "torch": torch.__version__,
        "accelerate": accelerate.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": usable_cores(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpu_info(),
    }
