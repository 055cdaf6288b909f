"""The caching allocator's high-water mark, emulated: what `torch.cuda.max_memory_allocated` reads.

A sum of categories (parameters + gradients + optimizer states + activations saved for
backward, `memory.memory_breakdown`) is not a GPU's peak. The peak is the largest amount of
memory *alive at one moment*, and at the worst moment of a training step more is alive than
the tensors autograd saved: the logits and the loss's intermediates (``log_softmax``'s output,
then in backward its gradient beside the gradient of the logits), autocast's low-precision
copies of the weights, the gradients being produced while activations are released, an
optimizer's temporaries (`_foreach_sqrt` makes a full copy of Adam's second moment).

`AllocatorMeter` follows every storage the program creates, op by op, the way the CUDA caching
allocator hands out blocks (PyTorch, "CUDA semantics — memory management";
``c10/cuda/CUDACachingAllocator.cpp``):

- each new storage is a block of ``⌈bytes / 512⌉ · 512`` bytes (``kMinBlockSize``; the
  2 MiB/20 MiB *segments* it carves blocks from are reserved memory, which
  `max_memory_allocated` does not count);
- a block is freed when the last tensor using the storage dies (views share it) — a
  weak reference per storage tells when;
- the peak is read after each op's outputs exist and before its dead inputs are swept, as the
  allocator sees it: an op's inputs and outputs are alive together;
- besides tensors, cuBLAS holds one workspace per (handle, stream) — 32 MiB on Hopper
  (``getChosenWorkspaceSize``, ``CublasHandlePool.cpp``) — and the autograd engine runs a
  CUDA backward on its own thread, with its own handle: two workspaces once a step has run
  GEMMs forward and backward (`workspace_bytes`, from the profile).

Works on real and on fake tensors (shape mode: a fake storage has no address, but it has a
size and dies like any other), so a GPT-2 on a laptop reports the peak the GPU would.
"""
from __future__ import annotations

from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import torch

from mgpukit.measure.shape import is_fake, storage_key

BLOCK = 512  # bytes: the caching allocator rounds every block up to a multiple of this


def block_bytes(nbytes: int) -> int:
    """Bytes the caching allocator hands out for a request of ``nbytes`` (0 stays 0)."""
    return -(-int(nbytes) // BLOCK) * BLOCK


class AllocatorMeter(TorchDispatchMode):
    """Live and peak bytes of every storage created while the mode is on (module docstring).

    ``track(tensors)`` adds storages made before (parameters, inputs) to the live count.
    ``workspace`` bytes are added once a GEMM has run on each of the forward and backward
    threads (pass the profile's figure; 0 on CPU workers)."""

    def __init__(self, *, workspace: int = 0, only_fake: bool = False):
        super().__init__()
        self.workspace = int(workspace)
        self.only_fake = only_fake  # shape mode: real tensors are the run's bookkeeping, not the GPU's
        self.live = 0
        self.peak = 0
        self._blocks: dict[int, tuple[StorageWeakRef, int]] = {}
        self._threads: set[str] = set()  # "forward", "backward": cuBLAS handles that hold a workspace

    def track(self, tensors) -> None:
        """Count the storages behind `tensors` (made before the meter started) as allocated."""
        for t in tree_leaves(tensors):
            if isinstance(t, torch.Tensor):
                self._add(t)
        self.peak = max(self.peak, self.live)

    @property
    def live_now(self) -> int:
        """Bytes alive now (what `live` counts once the dead are swept)."""
        self._sweep()
        return self.live

    def reset_peak(self) -> None:
        """`torch.cuda.reset_peak_memory_stats`: the peak starts again from what is alive now."""
        self._sweep()
        self.peak = self.live

    def _new_block(self, t: torch.Tensor):
        """``(key, weak ref, bytes)`` of `t`'s storage if the meter does not hold it yet."""
        local = t.to_local() if hasattr(t, "to_local") else t
        if self.only_fake and not is_fake(local):
            return None
        try:
            storage = local.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        key = storage_key(storage)
        if not key:
            return None
        held = self._blocks.get(key)
        if held is not None:
            if not held[0].expired():
                return None  # a storage the meter holds already (a view, an in-place op)
            self.live -= self._blocks.pop(key)[1]  # a dead one whose address was handed out again
        return key, StorageWeakRef(storage), block_bytes(storage.nbytes())

    def _add(self, t: torch.Tensor) -> None:
        block = self._new_block(t)
        if block is not None:
            key, ref, nbytes = block
            self._blocks[key] = (ref, nbytes)
            self.live += nbytes

    def _sweep(self) -> None:
        dead = [key for key, (ref, _) in self._blocks.items() if ref.expired()]
        for key in dead:
            self.live -= self._blocks.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        new = self.workspace if self.workspace and func._overloadpacket in _GEMMS and self._thread() else 0
        blocks = [b for t in tree_leaves(out) if isinstance(t, torch.Tensor) for b in [self._new_block(t)] if b]
        new += sum(nbytes for _, _, nbytes in blocks)
        if new and self.live + new > self.peak:
            # only an allocation can make a new peak, and `live` (not swept since) is an upper
            # bound: sweep what died before this op — its blocks were back in the pool — only
            # when the bound could pass the peak
            self._sweep()
        for key, ref, nbytes in blocks:
            self._blocks[key] = (ref, nbytes)
        self.live += new
        self.peak = max(self.peak, self.live)
        return out

    def _thread(self) -> bool:
        """True the first time a GEMM runs on this thread kind (its cuBLAS workspace appears)."""
        thread = "backward" if torch._C._current_autograd_node() is not None else "forward"
        if thread in self._threads:
            return False
        self._threads.add(thread)
        return True


_aten = torch.ops.aten
_GEMMS = {_aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm}


def start_meter(rec, module, optimizer) -> AllocatorMeter | None:
    """The meter for an emulated run (None when measured: a GPU reads its own allocator), with
    what exists before the first step — parameters, gradients, buffers, optimizer state —
    already counted. Enter it around the steps; `memory.memory_breakdown` reads its peak."""
    if not rec.clock.emulated:
        return None
    profile = rec.clock.profile
    meter = AllocatorMeter(workspace=int(profile.blas_workspace) if profile.async_launch else 0,
                           only_fake=rec.shape)
    params = list(module.parameters())
    state = [v for s in (optimizer.state.values() if optimizer is not None else ()) for v in s.values()
             if isinstance(v, torch.Tensor) and v.dim() > 0]
    meter.track(params + [p.grad for p in params if p.grad is not None] + list(module.buffers()) + state)
    return meter
