"""mgpukit — learn and measure multi-GPU training strategies, on a laptop or on 8 GPUs."""
from mgpukit.runtime import (LaunchError, LaunchTimeout, OversubscribedWarning, ParallelDims,
                             WorkerContext, WorkerError, current, launch)

__version__ = "0.1.0"
__all__ = ["launch", "run", "current", "WorkerContext", "ParallelDims", "LaunchError", "LaunchTimeout",
           "WorkerError", "OversubscribedWarning", "__version__"]


def __getattr__(name):
    # `mgpukit.run` imports the strategies; loaded on first use so `import mgpukit` stays light.
    if name == "run":
        from mgpukit.experiment import run

        return run
    raise AttributeError(f"module 'mgpukit' has no attribute {name!r}")
