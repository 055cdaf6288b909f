"""Activation checkpointing: keep less for backward, compute it again when backward needs it.

Backward needs the activations forward computed. Keeping them all costs memory proportional to
layers × batch × sequence; *checkpointing* a region keeps only its inputs and runs the region's
forward again, during backward, just before its gradients are computed (Chen et al. 2016,
"Training Deep Nets with Sublinear Memory Cost"). Two policies on the GPT (Korthikanti et al.
2022, "Reducing Activation Recomputation in Large Transformer Models", §4-5):

=========  ==========================  ===================================  ==================
policy     region recomputed           kept per layer (16-bit, no TP)       extra forward
=========  ==========================  ===================================  ==================
full       every ``Block``             its input: ``2·s·b·h``               one whole forward
selective  every ``attn.core``         all but the ``5·a·s²·b`` core        the attention core
           (softmax(q kᵀ) v)                                                (a few % of FLOPs)
=========  ==========================  ===================================  ==================

Selective pays off when the core stores its ``s × s`` attention matrices (the math kernel,
dropout); a fused kernel (FlashAttention, PyTorch's SDPA on CPU and most GPUs) already keeps
only q, k, v, the output and a log-sum-exp, so selective then saves little — the memory
notebook measures both.

Mechanics: PyTorch's composable `checkpoint(module)` (non-reentrant `torch.utils.checkpoint`
installed as forward hooks), so parameter names — state dicts, parity, pipeline stages — are
unchanged. Applied after tensor parallelism and before the pipeline split (torchtitan's
`apply_ac` sits at the same place): a stage holds checkpointed blocks. Collectives: none.
Each recomputation is reported to the activation meter counting the forward
(`ActivationMeter.recomputing`), so the measured peak includes what backward recomputes.
"""
from __future__ import annotations

import contextlib

import torch.nn as nn
from torch.distributed._composable import checkpoint

from mgpukit.costmodel.flops import CHECKPOINTING
from mgpukit.measure.memory import ActivationMeter

POLICIES = CHECKPOINTING  # none | selective | full: one home, the cost model


def _metered_contexts():
    """checkpoint's `context_fn`, called as the region's forward starts: the meter counting
    that forward (if any) also counts the region's recomputation during backward."""
    meter = ActivationMeter.active()
    return contextlib.nullcontext(), (meter.recomputing() if meter is not None else contextlib.nullcontext())


def checkpointed_regions(model: nn.Module, policy: str) -> list[nn.Module]:
    """The modules `policy` recomputes: the GPT's blocks (full) or attention cores (selective);
    an MLP's layers (full only — it has no attention)."""
    if policy not in POLICIES:
        raise ValueError(f"checkpointing={policy!r}; choose one of {', '.join(POLICIES)}.")
    if policy == "none":
        return []
    layers = model.repeated()  # what the model declares (`models.layered.Layered`)
    if policy == "full":
        return list(layers)
    if not model.has_attention:
        raise ValueError("selective checkpointing recomputes the attention core; this model has "
                         "no attention. Use checkpointing='full' (or a GPT model).")
    return [block.attn.core for block in layers]


def apply_checkpointing(model: nn.Module, policy: str) -> nn.Module:
    """Checkpoint the regions of `policy` in place (module docstring); returns `model`."""
    for region in checkpointed_regions(model, policy):
        checkpoint(region, context_fn=_metered_contexts)
    return model


def check_checkpointing(policy: str, cfg, strat) -> None:
    """Refuse, saying what to change, a policy this run cannot apply (before anything starts)."""
    if policy not in POLICIES:
        raise ValueError(f"checkpointing={policy!r}; choose one of {', '.join(POLICIES)}.")
    if policy == "none":
        return
    if strat.worker is not None:
        raise ValueError(f"{strat.name} runs its own worker loop, outside the appliers; it cannot take "
                         f"checkpointing={policy!r}. Use checkpointing='none'.")
    if strat.schedule == "zb-h1":
        raise ValueError("the zero-bubble schedule runs each backward in two passes (input gradients, "
                         "then weight gradients), so a checkpointed region would be recomputed in both; "
                         "use checkpointing='none' with pp-zb, or a 1f1b / gpipe pipeline.")
    if policy == "selective" and not cfg.is_gpt:
        raise ValueError(f"selective checkpointing recomputes the attention core; {cfg.model} has no "
                         f"attention. Use checkpointing='full' or a GPT model.")
