"""A model's place and its weights, the same way for every strategy.

Two helpers the appliers share (`mgpukit.strategies`) without reaching into the trainer's
package: moving a model to its rank's device — also under fake tensors, where `.to` is refused —
and reading its weights as CPU copies under the unwrapped model's names, which is what parity
compares and `--save-weights` writes.
"""
from __future__ import annotations

import torch


def to_device(module: torch.nn.Module, device) -> torch.nn.Module:
    """`module.to(device)`, skipped when every parameter and buffer is there already: in shape
    mode `.to` would try to swap each fake parameter for a copy, which torch refuses."""
    device = torch.device(device)
    tensors = list(module.parameters()) + list(module.buffers())
    if all(_same_device(t.device, device) for t in tensors):
        return module
    return module.to(device)


def _same_device(have: torch.device, want: torch.device) -> bool:
    """cpu and cpu:0 are one device (Accelerate names it cpu:0); a GPU's index must match."""
    if have.type != want.type:
        return False
    return have.type == "cpu" or (have.index or 0) == (want.index or 0)


def full_state_dict(model: torch.nn.Module) -> dict:
    """CPU copies of the weights, names as in the unwrapped model (DDP's `module.` dropped)."""
    inner = getattr(model, "module", model)
    return {k: v.detach().to("cpu", copy=True) for k, v in inner.state_dict().items()}
