"""The seams between the appliers and the one trainer.

An applier (`mgpukit.parallelize`) turns an unmodified model into `Parts`: this rank's share of
the model, an *engine* that runs forward and backward for one step (a loop over micro-batches,
or a pipeline schedule), and a *gradient sync* over the data-parallel group. The trainer
(`trainer.py`) only ever talks to these three, so every strategy — and every composition of
them, dp × pp — trains through the same loop.

    engine.forward_backward(x, y, compute_ctx) -> this rank's share of the step's loss, or None
                                          (`compute_ctx()`: the hooks' context around each compute)
    engine.memory_note, engine.finish(steps) -> what the record says of its memory; its figures
    sync.no_sync()                        -> backward inside must not communicate
    sync.sync(step)                       -> after the last backward: gradients averaged
    sync.frees_grads                      -> `.grad` lives in no buffer of the sync's own, so the
                                             trainer may free it between steps (every sync declares it)
    sync.sharded_parts                    -> None, or `Parts -> Parts`: a sharded sync's shards are
                                             what the optimizer steps (every sync declares it)
    parts.after_step(step)                -> after the optimizer step (ZeRO: all-gather the
                                             updated shards back into the full parameters)

A sharded strategy (ZeRO, FSDP) hands the optimizer this rank's *shards* as `params`: the
optimizer state it builds over them is sharded by construction, and their gradients are
disjoint pieces of the full gradient (`grads_sharded`), so the trainer sums their squares
over the data-parallel group instead of averaging them.

What a rank holds of the full model — replicated, tp-split or sharded — is declared by the
applier that cut it (`holding`, `holding.py`); the checkpoint code reads that declaration.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import torch

from mgpukit.training.holding import Holding


class GradSync(Protocol):
    def no_sync(self) -> contextlib.AbstractContextManager: ...

    def sync(self, step: int) -> None: ...

    frees_grads: bool  # True: no buffer of the sync's own holds `.grad` (the trainer may free it)
    # a sharded sync (ZeRO, FSDP, local SGD's outer step): `Parts -> Parts` with this rank's shards
    # as what the optimizer steps and what runs after its step; None: the full parameters
    sharded_parts: Callable[["Parts"], "Parts"] | None


class NoSync:
    """One replica (or replicas that never talk): nothing to average."""

    # no buffer of its own holds the gradients: the trainer frees them between steps
    # (`zero_grad(set_to_none=True)`, as a plain loop), instead of a `zero_` and an `add_` per tensor
    frees_grads = True
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return contextlib.nullcontext()

    def sync(self, step: int) -> None:
        pass


class Engine(Protocol):
    meter: Any  # the ActivationMeter counting this rank's saved activations
    memory_note: str | None  # what the memory figures leave out (None: nothing), for the record

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor,
                         compute_ctx=contextlib.nullcontext) -> float | None: ...

    def finish(self, steps: int) -> dict:
        """After the last step: the engine's own figures for `rec.extra` (a pipeline's bubble)."""
        ...


@dataclasses.dataclass(kw_only=True)
class Parts:
    """This rank's share of a parallelized model and how to train it (module docstring)."""

    module: torch.nn.Module  # what the optimizer steps (DDP-wrapped, or this rank's stages)
    engine: Engine
    sync: GradSync
    params: list  # the parameters the optimizer steps and the gradient norm counts
    holds_loss: bool = True  # this rank logs the loss (the last pipeline stage, tp rank 0)
    # this rank's share of the full gradient's Σ‖g‖² (default: of `params`; tensor parallel
    # counts a replicated parameter 1/t on each of its t ranks)
    grad_sq: Callable[[], float] | None = None
    state_dict: Callable[[], dict] | None = None  # this rank's weights, full-model names
    after_step: Callable[[int], None] | None = None  # runs right after optimizer.step()
    grads_sharded: bool = False  # `params`' gradients are disjoint shards over dp (ZeRO)
    extra: dict = dataclasses.field(default_factory=dict)  # figures for rec.extra
    scaler: Any = None  # fp16's loss scaler (`policies.precision.LossScaler`), else None
    holding: Holding = dataclasses.field(default_factory=Holding)  # for checkpoints (holding.py)
    # a whole replica's loss of one micro-batch `(x, y)`: the forward, then the loss as the engine
    # computes it (weighted, fp16-scaled, tp's split vocabulary) — what an exported script's own
    # loop calls before `loss.backward()`; None for a pipeline's stages and torch's loss_parallel
    loss_of: Callable | None = None


@dataclasses.dataclass(kw_only=True)
class Split:
    """What a context- or expert-parallel applier (`Strategy.split`) hands to `parallelize`
    besides the model it rewrote in place: both cut *inside* the dp axis (`runtime.dims`), so
    the dp gradient sync, the batches and the logged loss need nothing else."""

    loss: Callable  # (logits, targets) -> this rank's mean loss (cp: over its own tokens)
    state_dict: Callable[[torch.nn.Module], dict] | None = None  # full weights (None: this rank's are)
    grad_sq: Callable[[list], float] | None = None  # this rank's share of Σ‖g‖² × dp (None: plain)
    extra: dict = dataclasses.field(default_factory=dict)  # figures for rec.extra, filled while training
