"""`tp-native`: the same split written as PyTorch's DTensor plan, for comparison.

`torch.distributed.tensor.parallel.parallelize_module` takes a plan — which submodule is
`ColwiseParallel`, which `RowwiseParallel` — and turns their weights into DTensors sharded on
the mesh's "tp" axis; the collectives (`f`, `g` of `comm.py`) come from DTensor's
redistributions at the module boundaries. The plan follows torchtitan's for Llama:
`PrepareModuleInput` makes the attention's and MLP's input one replicated DTensor, so q, k and
v share one backward all-reduce as in Megatron; the output layer stays vocabulary-sharded and
the loss runs under `loss_parallel()` (torch's vocabulary-parallel cross-entropy).

With sequence parallelism (`sp=True`) LayerNorms are `SequenceParallel` (their input split
along the sequence), the row-parallel outputs reduce-scatter to `Shard(1)`, and the attention
and MLP inputs are all-gathered back. One honest difference from `apply_tp`: the embedding
adds a replicated position table after the token lookup, which DTensor cannot mix with a
sequence-sharded tensor, so the lookup is all-reduced and then sliced to the rank's tokens
(`PrepareModuleOutput`) — an all-reduce where Megatron reduce-scatters.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                               RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)

from mgpukit.measure.observe import CommObserver
from mgpukit.models.weights import to_device
from mgpukit.strategies.tensor_parallel.apply import TensorParallel, check_divides


def apply_tp_native(model: nn.Module, ctx, rec, *, sp: bool = False, count_comm: bool = True) -> TensorParallel:
    """DTensor's tensor parallelism on the tp axis. `count_comm`: count and time DTensor's
    collectives with the `CommObserver` (a dispatch mode: it slows every op it sees, so the
    benchmark turns it off)."""
    check_divides(model.cfg, ctx.size("tp"), sp=sp)
    mesh = ctx.mesh["tp"]
    to_device(model, ctx.device)
    between = Shard(1) if sp else Replicate()  # the residual stream's layout between blocks
    plan = {"embed.tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())}
    if sp:
        plan["embed"] = PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))
    for i in range(len(model.blocks)):
        b = f"blocks.{i}"
        plan.update({
            f"{b}.attn": PrepareModuleInput(input_layouts=(between,), desired_input_layouts=(Replicate(),)),
            f"{b}.attn.q_proj": ColwiseParallel(), f"{b}.attn.k_proj": ColwiseParallel(),
            f"{b}.attn.v_proj": ColwiseParallel(),
            f"{b}.attn.o_proj": RowwiseParallel(output_layouts=between),
            f"{b}.mlp": PrepareModuleInput(input_layouts=(between,), desired_input_layouts=(Replicate(),)),
            f"{b}.mlp.fc1": ColwiseParallel(),
            f"{b}.mlp.fc2": RowwiseParallel(output_layouts=between),
        })
        if sp:
            plan[f"{b}.ln_1"] = SequenceParallel()
            plan[f"{b}.ln_2"] = SequenceParallel()
    if sp:
        plan["head.ln_f"] = SequenceParallel()
    plan["head.lm_head"] = ColwiseParallel(input_layouts=between, output_layouts=Shard(-1),
                                           use_local_output=False)
    parallelize_module(model, mesh, plan)
    t = ctx.size("tp")
    observed = _observing(rec) if count_comm else contextlib.nullcontext

    @contextlib.contextmanager
    def around():
        with observed(), loss_parallel():
            yield
    return TensorParallel(
        model=model, loss=_loss, state_dict=lambda m: _full_state(m, rec), grad_sq=lambda ps: _grad_sq(ps, t),
        holds_loss=ctx.coords["tp"] == 0, around=around,
        wrap_sync=lambda sync: PendingSumSync(sync, list(model.parameters()), observed))


def _observing(rec):
    return lambda: CommObserver(rec)


class PendingSumSync:
    """The dp sync, then every gradient DTensor left as a pending sum (`Partial`) made whole.

    With `SequenceParallel`, a LayerNorm's replicated weight sees only its rank's tokens, and
    DTensor returns its gradient as `Partial(sum)` — the reduction is left to whoever reads it
    (the optimizer would do it implicitly, the gradient norm would not). Redistributing to
    `Replicate` here is the all-reduce `apply_tp`'s `SequenceParallelGradSync` does by hand."""

    def __init__(self, inner, params, observed=contextlib.nullcontext):
        self.inner, self.params, self.observed = inner, params, observed

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return self.inner.no_sync()

    def sync(self, step: int) -> None:
        self.inner.sync(step)
        with self.observed():
            for p in self.params:
                g = p.grad
                if g is not None and any(pl.is_partial() for pl in getattr(g, "placements", ())):
                    p.grad = g.redistribute(placements=[Replicate()] * len(g.placements))


def _loss(logits, targets):
    """Cross-entropy of vocabulary-sharded DTensor logits (inside `loss_parallel()`)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))


def _is_sharded(t) -> bool:
    return any(p.is_shard() for p in getattr(t, "placements", ()))


def _grad_sq(params, t: int) -> float:
    total = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p.grad is None:
            continue
        # the gradient's own placement: an embedding sharded by rows gets a *replicated* grad
        g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
        sq = g.detach().double().pow(2).sum().cpu()
        total += sq if _is_sharded(p.grad) else sq / t
    return float(total)


def _full_state(module: nn.Module, rec) -> dict:
    inner = module.module if isinstance(module, DistributedDataParallel) else module  # DDP-wrapped: its model
    with rec.untimed():
        return {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().to("cpu", copy=True)
                for name, p in inner.named_parameters()}
