"""Launching workers, the worker context, hardware detection, parallel dims -> DeviceMesh."""
from mgpukit.runtime.context import WorkerContext, current
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.launcher import (LaunchError, LaunchTimeout, OversubscribedWarning,
                                    WorkerError, launch)

__all__ = ["launch", "current", "WorkerContext", "ParallelDims", "LaunchError",
           "LaunchTimeout", "WorkerError", "OversubscribedWarning"]
