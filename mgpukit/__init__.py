"""mgpukit — learn and measure multi-GPU training strategies, on a laptop or on 8 GPUs."""

# First, before anything imports torch: OpenMP reads its wait policy once, when torch loads it
# (passive waiting, unless the user chose; `mgpukit/threads.py` says why and what happens if
# torch came first).
from mgpukit import threads as _threads

_threads.set_before_torch()


__version__ = "0.1.0"
__all__ = ["launch", "run", "current", "WorkerContext", "ParallelDims", "LaunchError", "LaunchTimeout",
           "WorkerError", "OversubscribedWarning", "__version__"]


def __getattr__(name):
    # Loaded on first use: `import mgpukit.costmodel` (pure arithmetic) must not pay for torch,
    # and `mgpukit.run` imports every strategy.
    if name == "run":
        from mgpukit.experiment import run  # lazy: see above

        return run
    if name in __all__:
        from mgpukit import runtime  # lazy: see above

        return getattr(runtime, name)
    raise AttributeError(f"module 'mgpukit' has no attribute {name!r}")
