"""Memory by category: parameters, gradients, optimizer state, activations, peak.

Parameters, gradients and optimizer state are the bytes of those tensors on this rank (a
sharded strategy holds only its shard, and that is what is counted). Activations are the
tensors autograd saves for backward, measured live with `saved_tensors_hooks`: a tensor is
counted when the forward saves it and released when autograd frees the graph, so the meter's
peak is the activation memory actually held — e.g. m micro-batches in flight for GPipe,
at most p for 1F1B. On GPUs the peak is also read from the CUDA caching allocator.
"""
from __future__ import annotations

import contextlib

import torch


class _Saved:
    """What autograd keeps instead of the tensor: frees its bytes from the meter when dropped."""

    __slots__ = ("tensor", "meter", "key")

    def __init__(self, tensor, meter, key):
        self.tensor, self.meter, self.key = tensor, meter, key

    def __del__(self):
        self.meter._release(self.key)


class ActivationMeter:
    """Live and peak bytes of tensors saved for backward, shared storages counted once."""

    def __init__(self, params=()):
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list] = {}  # storage ptr -> [refcount, nbytes]
        self._skip = {_local(p).untyped_storage().data_ptr() for p in params}

    def skip(self, tensor, skipped: bool = True) -> None:
        """Treat `tensor`'s storage as weights, not activations (ZeRO-3 gathers its parameters
        into fresh buffers each time; `skipped=False` when it frees them again)."""
        key = tensor.untyped_storage().data_ptr()
        (self._skip.add if skipped else self._skip.discard)(key)

    def _pack(self, tensor):
        storage = _local(tensor).untyped_storage()  # a DTensor's bytes are its local shard
        key = storage.data_ptr()
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
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield

    def reset_peak(self):
        self.peak = self.live


def tensor_bytes(tensors) -> int:
    """Bytes of the storages behind `tensors`, each storage counted once: views into one flat
    buffer (bucket views, ZeRO's parameters and their shard) are one allocation."""
    storages, loose = {}, 0
    for t in tensors:
        if t is None:
            continue
        try:
            storage = t.untyped_storage()
            storages[storage.data_ptr() or id(storage)] = storage.nbytes()
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


def memory_breakdown(model, optimizer, meter: ActivationMeter | None, device=None) -> dict:
    """Bytes by category on this rank; `peak` measured on GPUs, their sum on CPU workers."""
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
    else:
        out["peak"] = out["params"] + out["grads"] + out["optimizer"] + out["activations"]
        out["source"] = "measured tensor bytes (peak = sum of categories)"
    return out
