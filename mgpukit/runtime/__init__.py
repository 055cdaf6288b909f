"""Launching workers, the worker context, hardware detection, parallel dims -> DeviceMesh."""
import os

# First, before anything can touch CUDA: `torch.cuda.is_available()` (a notebook cell, a library)
# then asks NVML instead of creating a CUDA context, and the kernel can still fork GPU workers.
# setdefault: a user who set it either way keeps their choice.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

from mgpukit.runtime.context import WorkerContext, current
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.launcher import (LaunchError, LaunchTimeout, OversubscribedWarning,
                                    WorkerError, launch)

__all__ = ["launch", "current", "WorkerContext", "ParallelDims", "LaunchError",
           "LaunchTimeout", "WorkerError", "OversubscribedWarning"]
