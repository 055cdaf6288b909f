"""mgpukit — learn and measure multi-GPU training strategies, on a laptop or on 8 GPUs."""
from mgpukit.runtime import (LaunchError, LaunchTimeout, OversubscribedWarning, ParallelDims,
                             WorkerContext, WorkerError, current, launch)

__version__ = "0.1.0"
__all__ = ["launch", "current", "WorkerContext", "ParallelDims", "LaunchError", "LaunchTimeout",
           "WorkerError", "OversubscribedWarning", "__version__"]
