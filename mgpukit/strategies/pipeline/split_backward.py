"""Backward split in two for zero-bubble schedules: input-grad now (I), weight-grad later (W).

Qi et al. 2023 ("Zero Bubble Pipeline Parallelism", arXiv:2401.10241) observe that a
layer's backward is two independent computations: the gradient w.r.t. its *input*, which the
previous stage is waiting for, and the gradient w.r.t. its *weights*, which nobody needs
until the optimizer step. Running the first at once and the second later fills the pipeline's
cool-down bubble with useful work.

With autograd that split costs no extra arithmetic:

- **forward**: a forward hook on every module that owns parameters (Linear, LayerNorm,
  Embedding) remembers its output ``y_k`` and its parameters;
- **I**: ``torch.autograd.grad(out, [stage_input, y_1, …, y_K], grad, retain_graph=True)``.
  Autograd runs only the nodes on paths to what was asked for, and inside a node computes only
  the outputs that lead there (``should_compute_output``), so no weight gradient is formed —
  but the gradient flowing *into* every ``y_k`` is kept;
- **W**: for each module, ``torch.autograd.grad(y_k, params_k, grad_y_k)`` — one node's
  weight gradient (for a Linear, ``grad_y^T @ x``), added into ``.grad``. One call per module:
  asking for all of them at once would push ``y_q``'s gradient on into ``y_ln``'s and count it
  twice.

The price is memory: the graph (and so the activations) of a micro-batch lives until its W.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn


class WeightGradCapture:
    """Forward hooks that record ``(output, params)`` of each parameter-owning module."""

    def __init__(self, modules: list[nn.Module]):
        self._active: list | None = None
        self._handles = []
        for mod in modules:
            for sub in mod.modules():
                params = [p for p in sub.parameters(recurse=False) if p.requires_grad]
                if params:
                    self._handles.append(sub.register_forward_hook(self._hook(params)))

    def _hook(self, params):
        def hook(module, args, output):
            if (self._active is not None and isinstance(output, torch.Tensor)
                    and output.requires_grad):
                self._active.append((output, params))
        return hook

    @contextlib.contextmanager
    def capture(self, into: list):
        """Record the modules run inside into the list ``into``."""
        self._active = into
        try:
            yield into
        finally:
            self._active = None

    def remove(self):
        for h in self._handles:
            h.remove()


def backward_input(out: torch.Tensor, grad: torch.Tensor | None, stage_input: torch.Tensor | None,
                   captured: list) -> tuple[torch.Tensor | None, list]:
    """I: the gradient w.r.t. ``stage_input`` (None for stage 0) and the gradients flowing into
    each captured module output (kept for W). The graph is retained for W."""
    wants_input = stage_input is not None and stage_input.requires_grad
    targets = ([stage_input] if wants_input else []) + [y for y, _ in captured]
    grads = torch.autograd.grad(out, targets, grad, retain_graph=True, allow_unused=True)
    grad_input = grads[0] if wants_input else None
    return grad_input, list(grads[1:] if wants_input else grads)


def backward_weight(captured: list, grads_out: list) -> None:
    """W: each module's weight gradient from its saved output-gradient, added into ``.grad``."""
    for (y, params), gy in zip(captured, grads_out):
        if gy is None:
            continue
        for p, g in zip(params, torch.autograd.grad(y, params, gy, allow_unused=True)):
            if g is None:
                continue
            if p.grad is None:
                p.grad = g
            else:
                p.grad.add_(g)
