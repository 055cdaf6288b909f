"""The engine of a whole-model replica: forward and backward over `k` micro-batches.

One optimizer step is `k = ctx.layout.num_micro_batches` micro-steps on this rank's slice of the global
batch. Each runs forward and backward on 1/k of the rows with the loss divided by k, so the
gradients summed in `p.grad` are the gradient of the mean loss over the whole slice: the same
step as one large batch (Goyal et al. 2017, §2), at the activation memory of a small one.
Gradients are communicated only after the last micro-step — the others run inside
`sync.no_sync()` (torch DDP's `no_sync`, our strategies' own switch) — so k micro-steps cost
k× compute but 1× communication.

    [fwd_0, bwd_0] ... [fwd_{k-1}, bwd_{k-1} (+ comm)]

Activations saved for backward are counted (`ActivationMeter`: a Python hook on every saved
tensor) during the first `METERED_STEPS` steps only: every step saves the same tensors, so the
peak is known by then, and later steps run as a plain loop would — the hook cost ~1.5 % of a
gpt-tiny step (`mgpukit bench overhead`).

The loss is returned as a device tensor, not a float: each `.item()` is a wait for the device
and a copy, so the trainer reads the loss and the gradient norm together, once per step.
"""
from __future__ import annotations

import contextlib

from mgpukit.data import split_microbatches
from mgpukit.measure.memory import ActivationMeter
from mgpukit.measure.shape import is_fake


METERED_STEPS = 2  # steps whose saved activations are counted (module docstring)


class LocalEngine:
    """The `Engine` of a whole-model replica (module docstring)."""

    memory_note = None  # every saved activation passes the meter

    def __init__(self, rec, module, *, sync, loss_fn, micro_batches: int, params, around=None):
        self.rec, self.module, self.sync, self.loss_fn = rec, module, sync, loss_fn
        self.k = micro_batches
        self.meter = ActivationMeter(params)
        self.around = around or contextlib.nullcontext  # e.g. torch's loss_parallel()
        self.steps_run = 0

    def forward_backward(self, x, y, compute_ctx=contextlib.nullcontext):
        """The step's loss as a 0-dim tensor on the device (not read here: reading it waits for
        the device; the trainer reads it once per step together with the gradient norm), or
        None in shape mode."""
        rec, k = self.rec, self.k
        loss_sum = 0.0
        metered = self.steps_run < METERED_STEPS
        self.steps_run += 1
        # one micro-batch (the usual case): no split and no `/ 1` — two ops a plain loop does not issue
        pieces = split_microbatches(x, y, k) if k > 1 else ((x, y),)
        for m, (xm, ym) in enumerate(pieces):
            last = m == k - 1
            mb = m if k > 1 else None
            with (contextlib.nullcontext() if last else self.sync.no_sync()), self.around():
                with rec.compute("fwd", microbatch=mb), \
                        self.meter.track() if metered else contextlib.nullcontext(), compute_ctx():
                    loss = self.loss_fn(self.module(xm), ym)
                    if k > 1:
                        loss = loss / k  # mean over the slice
                with rec.compute("bwd", microbatch=mb), compute_ctx():
                    loss.backward()
            if is_fake(loss):  # shape mode: a fake loss has no value
                loss_sum = None
            elif loss_sum is not None:  # kept on the device: the trainer reads it with the norm
                loss_sum = loss.detach() if m == 0 else loss_sum + loss.detach()
        return loss_sum

    def finish(self, steps: int) -> dict:
        return {}  # nothing of its own to report
