"""Timeline events, memory by category, bytes communicated, and the virtual clock."""
from mgpukit.measure.memory import ActivationMeter, memory_breakdown
from mgpukit.measure.observe import CommObserver, unobserved
from mgpukit.measure.recorder import Handle, Recorder, WallClock

__all__ = ["Recorder", "WallClock", "Handle", "ActivationMeter", "memory_breakdown",
           "CommObserver", "unobserved"]
