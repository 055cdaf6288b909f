"""Shape mode: the real program at real scale, with tensors that have shapes but no data.

An emulated run (`--emulate PROFILE`) already takes its timings from the virtual clock
(`vclock.py`), which charges each op by its FLOPs and bytes — numbers that depend only on
shapes. So the data can go: under torch's `FakeTensorMode` every tensor is a *fake* tensor
(shape, dtype, device, strides; no storage), every op computes its output's shape, and the
same strategy code — the appliers, the pipeline schedule, the one trainer — runs a 1.3 B or
7 B model on a laptop in seconds, with exact FLOP counts and no memory. What changes:

- **collectives move nothing but keep their time**: the recorder skips the payload and still
  exchanges the small *real* ready-time tensors (created with fake mode unset, `real()`), so
  ranks agree on when a collective starts; a message sends only its timestamp;
- **memory** is read from the fake tensors' sizes (`storage_key` identifies a fake storage,
  which has no address);
- **losses are not numbers** (`value_or_none` gives None): the record logs null, and parity
  against a reference is "n/a (shape mode)";
- **batches** are token ids of the right shape (all zeros: values never matter).

The same idea as torch's `torch.distributed._tools` (RuntimeEstimator: roofline estimates
under fake tensors; fake collectives; FSDPMemTracker) and torchtitan's memory estimation,
applied to the kit's whole run — compute, communication and memory on one timeline.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily

__all__ = ["fake_mode", "real", "is_fake", "value_or_none", "storage_key", "fake_group"]


def fake_mode():
    """The context every shape-mode worker runs its model, data and training in.

    `allow_non_fake_inputs`: a real tensor made before the mode (a seed, a constant) may meet a
    fake one; it is treated as fake from then on."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def real():
    """Fake mode unset for a moment: tensors made inside are real (timestamps, bookkeeping).
    A no-op outside shape mode."""
    return unset_fake_temporarily()


def is_fake(t) -> bool:
    return isinstance(t, FakeTensor)


def value_or_none(t) -> float | None:
    """A scalar tensor's value, or None when it is fake (it has none)."""
    if t is None:
        return None
    if is_fake(t):
        return None
    return float(t)


def storage_key(storage) -> int:
    """An identity for a storage shared by its views: its address, or — for a fake (meta)
    storage, which has none — its StorageImpl. 0 for an empty real storage."""
    if storage.device.type == "meta":
        return storage._cdata
    return storage.data_ptr()


def fake_group():
    """A process group over every rank whose collectives do nothing (torch's fake backend,
    `torch.testing._internal.distributed.fake_pg`), for a library that would talk over its own
    group with the data — torch DDP's constructor checks and bucket rebuild. The timed
    traffic still goes through the recorder (DDP's comm hook), timestamps over the real group.
    Collective: every rank calls it at the same point.

    The kit's one private torch import, and why: the backend's name is public
    (`torch.distributed.Backend.FAKE`) but its creator is registered only when that testing
    module is imported — without it, torch 2.13's ``new_group(backend="fake")`` raises "Unknown
    c10d backend type FAKE" (checked 2026-12-07). `tests/test_imports.py` keeps it here alone."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake"; lazy: shape mode only)

    return dist.new_group(backend="fake")


@contextlib.contextmanager
def maybe(enabled: bool):
    """`fake_mode()` when `enabled`, else nothing."""
    if not enabled:
        yield
        return
    with fake_mode():
        yield
