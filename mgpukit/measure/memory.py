"""Memory by category: parameters, gradients, optimizer state, activations, peak.

Parameters, gradients and optimizer state are the bytes of those tensors on this rank (a
sharded strategy holds only its shard, and that is what is counted). Activations are the
tensors autograd saves for backward, measured live with `saved_tensors_hooks`: a tensor is
counted when the forward saves it and released when autograd frees the graph, so the meter's
peak is the activation memory actually held — e.g. m micro-batches in flight for GPipe,
at most p for 1F1B. On GPUs the peak is also read from the CUDA caching allocator.

Under activation checkpointing (`torch.utils.checkpoint`, non-reentrant) the tensors saved
inside a checkpointed region go to checkpoint's own hooks, not the meter's: what the meter
sees in forward is what checkpointing really keeps (each region's inputs). During backward the
region runs forward again and its recomputed tensors live until its backward has used them;
`recomputing()` (entered by the checkpointing policy around each recomputation) adds the bytes
alive at the end of a recomputation to the live count, so `peak` is the activation memory the
run really held at its fullest — forward or backward.
"""
from __future__ import annotations

import contextlib
import threading

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mgpukit.measure.shape import storage_key


class _Saved:
    """What autograd keeps instead of the tensor: frees its bytes from the meter when dropped."""

    __slots__ = ("tensor", "meter", "key")

    def __init__(self, tensor, meter, key):
        self.tensor, self.meter, self.key = tensor, meter, key

    def __del__(self):
        self.meter._release(self.key)


class ActivationMeter:
    """Live and peak bytes of tensors saved for backward, shared storages counted once."""

    _tracking = threading.local()  # the meters whose `track()` is open in this thread

    def __init__(self, params=()):
        self.live = 0
        self.peak = 0
        self.recomputed_peak = 0  # the largest one recomputation held (checkpointing)
        self._refs: dict[int, list] = {}  # storage ptr -> [refcount, nbytes]
        self._skip = {storage_key(_local(p).untyped_storage()) for p in params}

    def skip(self, tensor, skipped: bool = True) -> None:
        """Treat `tensor`'s storage as weights, not activations (ZeRO-3 gathers its parameters
        into fresh buffers each time; `skipped=False` when it frees them again)."""
        key = storage_key(tensor.untyped_storage())
        (self._skip.add if skipped else self._skip.discard)(key)

    def _pack(self, tensor):
        storage = _local(tensor).untyped_storage()  # a DTensor's bytes are its local shard
        key = storage_key(storage)  # shape mode: a fake storage has no address
        if key in self._skip or key == 0:  # weights are parameters, not activations
            return tensor
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [1, storage.nbytes()]
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        else:
            entry[0] += 1
        # detach: an op that saves its own output would otherwise keep its grad_fn alive through
        # us — a cycle only a full backward breaks (bytes leak under retain_graph / partial bwd)
        return _Saved(tensor.detach(), self, key)

    @staticmethod
    def _unpack(saved):
        return saved.tensor if isinstance(saved, _Saved) else saved

    def _release(self, key):
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]

    @contextlib.contextmanager
    def track(self):
        """Count what the forward passes run inside this block save for backward."""
        stack = self._tracking.__dict__.setdefault("meters", [])
        stack.append(self)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            stack.pop()

    @classmethod
    def active(cls) -> "ActivationMeter | None":
        """The meter counting the forward running now in this thread (None outside `track`)."""
        stack = cls._tracking.__dict__.get("meters")
        return stack[-1] if stack else None

    def recomputing(self):
        """A context around a checkpointed region's recomputation: the bytes of the tensors it
        creates that are still alive when it ends (the ones kept for the region's backward)
        are added to `live` for the peak (module docstring)."""
        return _RecomputeCounter(self)

    def reset_peak(self):
        self.peak = self.live


class _RecomputeCounter(TorchDispatchMode):
    """Weak references to every storage the recomputation's ops create; at the end, those
    still alive (and not already counted, nor parameters) are the recomputed activations."""

    def __init__(self, meter: ActivationMeter):
        super().__init__()
        self.meter = meter
        self.created: list[tuple[StorageWeakRef, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                self.created.append((StorageWeakRef(storage), storage_key(storage), storage.nbytes()))
        return out

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        alive = {key: n for ref, key, n in self.created
                 if not ref.expired() and key and key not in self.meter._skip and key not in self.meter._refs}
        self.created.clear()
        m = self.meter
        m.recomputed_peak = max(m.recomputed_peak, sum(alive.values()))
        m.peak = max(m.peak, m.live + sum(alive.values()))
        return out


def tensor_bytes(tensors) -> int:
    """Bytes of the storages behind `tensors`, each storage counted once: views into one flat
    buffer (bucket views, ZeRO's parameters and their shard) are one allocation."""
    storages, loose = {}, 0
    for t in tensors:
        if t is None:
            continue
        try:
            storage = t.untyped_storage()
            storages[storage_key(storage) or id(storage)] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # no storage (fake / meta tensors)
            loose += t.numel() * t.element_size()
    return int(sum(storages.values()) + loose)


def _local(t):
    """The rank's own piece of a (possibly DTensor-sharded) tensor."""
    return t.to_local() if hasattr(t, "to_local") else t


def optimizer_bytes(optimizer) -> int:
    if optimizer is None:
        return 0
    return tensor_bytes(_local(v) for state in optimizer.state.values() for v in state.values()
                        if isinstance(v, torch.Tensor) and v.dim() > 0)


def reset_device_peak(device=None) -> None:
    """Start a run's peak from now: the CUDA allocator's high-water mark outlives a run in the
    same process (a reference run, then the strategy), so `peak` would report the larger one."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory_breakdown(model, optimizer, meter: ActivationMeter | None, device=None, *, allocator=None) -> dict:
    """Bytes by category on this rank; `peak` measured on GPUs, emulated (the caching
    allocator's high-water mark, `measure.allocator`) when `allocator` followed the run, else
    the sum of the categories (CPU workers)."""
    params = list(model.parameters())
    out = {
        "params": tensor_bytes(_local(p) for p in params),
        "grads": tensor_bytes(_local(p.grad) for p in params if p.grad is not None),
        "optimizer": optimizer_bytes(optimizer),
        "activations": meter.peak if meter is not None else 0,
    }
    if device is not None and torch.device(device).type == "cuda":
        out["peak"] = int(torch.cuda.max_memory_allocated(device))
        out["source"] = "measured (CUDA allocator)"
    elif allocator is not None:
        out["peak"] = int(allocator.peak)
        out["source"] = ("emulated allocator high-water mark (what is alive at the worst moment, "
                         "512-byte blocks, cuBLAS workspaces)")
    else:
        out["peak"] = out["params"] + out["grads"] + out["optimizer"] + out["activations"]
        out["source"] = "measured tensor bytes (peak = sum of categories)"
    return out
