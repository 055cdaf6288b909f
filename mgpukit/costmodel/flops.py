"""FLOPs of one training step, counted matmul by matmul.

Only matrix multiplies are counted (2 FLOPs per multiply-add); norms, softmax and
element-wise ops are a few percent and are left to the efficiency factor. Per layer and per
token (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", §5.1, generalised to GQA and gated MLPs):

* forward linears: ``2 · layer_active_matmul_params`` (= ``24·h²`` for the standard GPT layer;
  in a mixture of experts, attention, the router and the ``top_k`` experts a token is routed to:
  the ``E − k`` others hold weights but do no work for it — Fedus et al. 2021, Switch §2: "the
  same FLOPs per token" as a dense model of one expert's size);
* attention scores ``Q·Kᵀ`` and ``A·V``: ``2 · 2 · s · h`` (causal masking is *not* halved,
  as in Megatron);
* logits, once per token: ``2 · h · V``.

The backward pass costs twice the forward (gradient w.r.t. inputs and w.r.t. weights).
Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models") adds another forward of the transformer layers (``full``) or of
the attention core only (``selective``). For the standard GPT this reproduces Narayanan's

    F = 72·B·s·l·h² · (1 + s/(6h) + V/(12·l·h))           (no recomputation)
    F = 96·B·s·l·h² · (1 + s/(6h) + V/(16·l·h))           (full recomputation)

and approaches ``6 · N · tokens`` (Kaplan et al. 2020) when ``s ≪ 6h``.
"""

from __future__ import annotations

from mgpukit.costmodel.shapes import ModelShape, layer_active_matmul_params

CHECKPOINTING = ("none", "selective", "full")


def layer_forward_flops(shape: ModelShape, tokens: int) -> dict[str, float]:
    """Forward FLOPs of one layer for ``tokens`` tokens: ``linear`` and ``attention`` (core)."""
    linear = 2.0 * layer_active_matmul_params(shape) * tokens
    attention = 4.0 * shape.seq_len * shape.d_model * tokens  # QKᵀ and AV over all heads
    return {"linear": linear, "attention": attention}


def logits_forward_flops(shape: ModelShape, tokens: int) -> float:
    """Forward FLOPs of the output projection (``lm_head``)."""
    return 2.0 * shape.d_model * shape.vocab * tokens


def recompute_flops(shape: ModelShape, tokens: int, checkpointing: str) -> float:
    """Extra forward FLOPs of activation recomputation, whole model, ``tokens`` tokens."""
    if checkpointing not in CHECKPOINTING:
        raise ValueError(f"checkpointing={checkpointing!r}; choose one of {', '.join(CHECKPOINTING)}")
    layer = layer_forward_flops(shape, tokens)
    if checkpointing == "full":  # the whole layer runs forward again during backward
        return shape.n_layer * (layer["linear"] + layer["attention"])
    if checkpointing == "selective":  # only softmax(QKᵀ)·V is recomputed (Korthikanti §5)
        return shape.n_layer * layer["attention"]
    return 0.0


def flops_per_step(shape: ModelShape, batch: int, *, checkpointing: str = "none") -> dict[str, float]:
    """FLOPs of one step over ``batch`` sequences of ``shape.seq_len`` tokens, all GPUs together.

    Returns ``forward``, ``backward`` (= 2 · forward), ``recompute``, ``total`` (what the
    hardware executes) and ``model`` (forward + backward: the numerator of MFU, which by
    definition excludes recomputation; Chowdhery et al. 2022, PaLM, Appendix B).
    """
    tokens = batch * shape.seq_len
    layer = layer_forward_flops(shape, tokens)
    forward = shape.n_layer * (layer["linear"] + layer["attention"]) + logits_forward_flops(shape, tokens)
    backward = 2.0 * forward
    recompute = recompute_flops(shape, tokens, checkpointing)
    return {
        "forward": forward,
        "backward": backward,
        "recompute": recompute,
        "total": forward + backward + recompute,
        "model": forward + backward,
    }


def megatron_flops(shape: ModelShape, batch: int, *, full_recompute: bool = False) -> float:
    """Narayanan et al. 2021 closed form (standard GPT layer: d_ff = 4h, MHA, no gating).

    ``72·B·s·l·h²·(1 + s/6h + V/12lh)``; with full recomputation ``96·B·s·l·h²·(1 + s/6h + V/16lh)``.
    """
    B, s, l, h, V = batch, shape.seq_len, shape.n_layer, shape.d_model, shape.vocab
    if full_recompute:
        return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
