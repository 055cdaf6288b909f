"""`hybrid`: data × tensor × pipeline parallelism (+ ZeRO-1 on dp) on one device mesh.

Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21) train a 1T-parameter GPT on 3,072 GPUs by nesting the three: each layer
split over ``t`` GPUs of a node (tensor parallel, Shoeybi et al. 2019), the layers cut into
``p`` stages (pipeline parallel, 1F1B), and ``d`` such pipelines on slices of the batch (data
parallel) — ``d·t·p`` GPUs on a mesh laid out ``(pp, dp, tp)``, tp fastest (`ParallelDims`).

What each rank runs, and with whom it talks (all through the recorder):

    axis  who                          what, per step
    tp    t ranks, same (pp, dp)       2 all-reduces per block per pass (Megatron's f and g),
                                       the vocabulary-parallel embedding and loss on the first
                                       and last stage
    pp    p ranks, same (dp, tp)       the boundary activation (B, T, C) forward, its gradient
                                       back, per micro-batch: each tp rank sends its own copy
                                       (replicated within the tp group) to the same tp rank of
                                       the next stage — with ``--sp`` its own (B, T/t, C)
                                       slice of the sequence, 1/t of the bytes
    dp    d ranks, same (pp, tp)       after the whole schedule: the gradients of this rank's
                                       shard (its stage, its tp slice) averaged, one flat
                                       all-reduce — or ZeRO-1: reduce-scatter, all-gather

The composition is the core's, in its documented order (`mgpukit.parallelize`): `apply_tp`
rewrites the unmodified GPT, the policies (bf16, checkpointing) wrap its pieces, the pipeline
cut keeps this rank's stages of the tp-split model, and this module's gradient sync runs over
the dp group only. Knobs: the schedule (``--schedule``, 1F1B by default), the micro-batches
(``--micro-batches``, default 2·p), ``-o zero1=true``, ``--checkpointing``, ``--dtype``, ``--sp``.

Sequence parallelism (Korthikanti et al. 2022) composes with the pipeline as in Megatron-LM:
the residual stream stays split along the sequence across the stage boundary (the embedding
scatters it, the head's LayerNorm gathers it), so nothing is gathered to cross a stage, and
after the dp sync the sequence-parallel region's gradients (LayerNorms, row-parallel biases,
positions) are summed over tp for the stages this rank holds. Not yet with ZeRO-1 (below).

Parity: the gradients are those of the full batch, so losses, gradient norms and the gathered
weights match the single-process GPT — up to the order of floating-point additions (the
pipeline's micro-batches, the tp all-reduces): PyTorch's pipelining tolerance.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from mgpukit.costmodel.layout import Layout
from mgpukit.strategies.hybrid.theory import hybrid_theory
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.pipeline.pipeline_parallel import PARITY_TOLERANCE, V_KNOB
from mgpukit.strategies.registry import register
from mgpukit.strategies.sharding.zero1 import Zero1
from mgpukit.strategies.tensor_parallel import GPT_ONLY
from mgpukit.strategies.tensor_parallel.apply import is_split


def hybrid_layout(n: int) -> Layout:
    """The default layout of `n` workers: tp = 2 and pp = 2 where they fit, the rest dp."""
    tp = 2 if n % 2 == 0 else 1
    pp = 2 if n % (2 * tp) == 0 else 1
    return Layout(dp=n // (tp * pp), tp=tp, pp=pp, schedule="1f1b", dtype="fp32")


def layout_knobs(options: dict) -> dict:
    """The layout fields the knobs set: ``zero1`` -> ZeRO stage 1 over dp."""
    return {"zero": 1 if options.get("zero1") else 0}


class FlatAllReduceSync:
    """After the schedule, every gradient this rank holds averaged over the dp group in one
    flat all-reduce (one bucket: one latency instead of one per tensor)."""

    def __init__(self, rec, params, *, group, n: int):
        self.rec, self.params, self.group, self.n = rec, list(params), group, n

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return contextlib.nullcontext()  # the pipeline's backward never communicates over dp

    def sync(self, step: int) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])  # (Ψ_local,)
        self.rec.all_reduce(flat, group=self.group)
        flat.div_(self.n)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


class TensorParallelZero1(Zero1):
    """ZeRO-1 over dp on a tensor-parallel model: the shards mix split and replicated
    parameters, so the gradient norm weighs each element 1 (split: this tp rank's own piece)
    or 1/t (replicated: every tp rank holds the same copy) — summing over the world then
    counts every element of the full gradient once (`tensor_parallel.apply.tp_grad_sq`)."""

    def __init__(self, module, rec, *, group, rank: int, n: int, tp_size: int):
        super().__init__(module, rec, group=group, rank=rank, n=n)
        self.weights = [unit.my_shard(unit.flatten([torch.full_like(p, 1.0 if is_split(p) else 1.0 / tp_size)
                                                    for p in unit.params]))
                        for unit in self.units]  # (S,) per unit; the padding weighs 0

    def grad_sq(self) -> float:
        total = torch.zeros((), dtype=torch.float64)
        for unit, w in zip(self.units, self.weights):
            total += (unit.shard.grad.detach().double().pow(2) * w.double()).sum().cpu()
        return float(total)

    def sharded_parts(self, parts):
        return dataclasses.replace(super().sharded_parts(parts), grad_sq=self.grad_sq)


def apply_hybrid_dp(module, ctx, rec, cfg):
    """The dp applier: a flat all-reduce, or ZeRO-1 (``-o zero1=true``), over ``ctx.group("dp")``."""
    n, group = ctx.size("dp"), ctx.group("dp")
    if cfg.options.get("zero1"):
        return module, TensorParallelZero1(module, rec, group=group, rank=ctx.coords["dp"], n=n,
                                           tp_size=ctx.size("tp"))
    return module, FlatAllReduceSync(rec, module.parameters(), group=group, n=n)


def validate(cfg, dims) -> None:
    """Refuse, before launch, what the composition does not do yet."""
    if cfg.options.get("zero1") and cfg.layout.sp:
        raise ValueError("zero1 with sequence parallelism is not available yet: the sequence-parallel "
                         "gradients are summed over tp after ZeRO's reduce-scatter; drop --sp or zero1.")


register("hybrid", family="hybrid",
         description="DP × TP × PP on one mesh: Megatron layers, a pipeline schedule, dp sync (or ZeRO-1)",
         layout=hybrid_layout, layout_knobs=layout_knobs, grad_sync=apply_hybrid_dp,
         composes=("dp", "tp", "pp"), knobs=(Knob("zero1", bool, False, "ZeRO-1 over the dp axis: "
                                                  "optimizer states sharded, reduce-scatter + all-gather"),
                                             V_KNOB),
         models=GPT_ONLY, theory=hybrid_theory, validate=validate, tolerance=PARITY_TOLERANCE,
         min_workers=2, default_workers=8)
