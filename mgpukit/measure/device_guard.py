"""Device guard: inside mgpukit, a tensor factory called without `device=` makes a meta tensor.

On CPU workers `torch.zeros(n)` lands on the CPU, the right device by luck; on GPUs the same
line hands NCCL a CPU tensor (or mixes devices in an op). Under the guard such a call, made
from a file of the mgpukit package, returns a *meta* tensor instead — no data — so the first
collective that touches it fails loudly (`Recorder`'s device check names it), on CPU, in a
test. Calls with an explicit `device=` and `*_like` factories (they follow their input) are
left alone, as is code outside the package.

Exempt by design: modules that build on the CPU and move afterwards — `models/` (seeded CPU
init, then `.to(device)`) and `data.py` (batches made on the CPU, moved by the trainer).

Off by default. `launch(..., options={"device_guard": True})` (or `MGPUKIT_DEVICE_GUARD=1` when
the launch starts) asks for it; `mgpukit.experiment` turns it on around the strategy.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

_PACKAGE = str(Path(__file__).resolve().parents[1]) + "/"
_CPU_BY_DESIGN = ("models/", "data.py", "measure/device_guard.py")
FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.tensor, torch.arange,
             torch.rand, torch.randn, torch.randint, torch.as_tensor, torch.linspace,
             torch.eye, torch.empty_strided}


def _guarded_caller(depth: int = 2) -> bool:
    """Is the Python frame that called the factory in the mgpukit package, not exempt?"""
    code = sys._getframe(depth).f_code
    path = code.co_filename
    if not path.startswith(_PACKAGE):
        return False
    rel = path[len(_PACKAGE):]
    return not rel.startswith(_CPU_BY_DESIGN)


class DeviceGuard(TorchFunctionMode):
    """Factory calls without `device=` from mgpukit code make meta tensors (module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in FACTORIES and kwargs.get("device") is None and _guarded_caller():
            if func is torch.as_tensor and args and isinstance(args[0], torch.Tensor):
                return func(*args, **kwargs)  # follows its input, like *_like
            kwargs["device"] = "meta"
        return func(*args, **kwargs)
