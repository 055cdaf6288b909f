"""Autocast as a GPU applies it, on the CPU tensors of an emulated GPU.

An emulated GPU's tensors live on the CPU (real or fake), so ``torch.autocast`` there applies
*the CPU's* op lists, and the two lists differ (PyTorch ``aten/src/ATen/autocast_mode.cpp``;
"Automatic Mixed Precision — CUDA ops that can autocast to float32" vs "CPU ops that can
autocast to float32"). Where they differ on an op the kit's GPT calls, the emulated memory is
the CPU's, not the GPU's:

- ``cross_entropy_loss`` is on the CPU's fp32 list: bf16 logits are cast to an fp32 copy, then
  log-softmax and NLL run in fp32 (``4 + 4 + 4`` bytes per logit at the start of backward).
  CUDA has no rule for it: it decomposes into ``log_softmax(x, dim, dtype=x.dtype)`` — on
  CUDA's "fp32 unless a dtype is given" list and given bf16, so it runs in bf16 — and
  ``nll_loss``, on the fp32 list, which casts the log-probabilities to fp32 and saves that copy
  (``2 + 4 + 4``). For GPT-2 124M at batch 8 that is 0.82 GB of the H200's 9.53 GB peak
  (`costmodel.memory.autocast_loss_bytes`, the same rule in closed form).
- ``layer_norm`` (CUDA: fp32; CPU: no rule) and ``softmax`` / ``log_softmax`` without a dtype
  (CUDA: fp32) differ too, but the kit's GPT feeds its norms the fp32 residual stream and calls
  softmax only inside the loss, so they change nothing here; they are not re-ruled.

`gpu_autocast` enters ``torch.autocast("cpu", ...)`` and, for as long as it is on, registers
CUDA's behaviour for ``cross_entropy_loss`` in place of the CPU's rule (a kernel at the
``AutocastCPU`` dispatch key, removed again on exit: the process's CPU autocast is as before).
"""
from __future__ import annotations

import contextlib
import warnings

import torch

_active = 0
_library: torch.library.Library | None = None


def _cross_entropy_as_on_cuda(self, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    """``cross_entropy_loss`` under CUDA's autocast: no rule of its own, so its decomposition
    (``LossNLL.cpp``, class-index targets) runs with autocast still on."""
    if label_smoothing > 0 or self.shape == target.shape:  # probabilities or smoothing: not the kit's loss
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
            return torch.ops.aten.cross_entropy_loss(self.float(), target, weight, reduction, ignore_index,
                                                     label_smoothing)
    class_dim = 0 if self.dim() == 1 else 1
    log_probs = torch.ops.aten.log_softmax.int(self, class_dim, self.dtype)  # bf16 stays bf16
    return torch.ops.aten.nll_loss_nd(log_probs, target, weight, reduction, ignore_index)  # fp32 rule: a copy


@contextlib.contextmanager
def gpu_autocast(dtype: torch.dtype = torch.bfloat16, enabled: bool = True):
    """``torch.autocast("cpu", dtype)`` with CUDA's rule for the loss (module docstring)."""
    global _active, _library
    if not enabled:
        yield
        return
    if _active == 0:
        _library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():  # "overriding a previously registered kernel": on purpose
            warnings.simplefilter("ignore")
            _library.impl("cross_entropy_loss", _cross_entropy_as_on_cuda, "AutocastCPU")
    _active += 1
    try:
        with torch.autocast("cpu", dtype=dtype):
            yield
    finally:
        _active -= 1
        if _active == 0 and _library is not None:
            _library._destroy()
            _library = None
