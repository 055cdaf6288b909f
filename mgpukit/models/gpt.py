"""A tiny GPT (decoder-only transformer), written to be sharded by someone else.

The shape follows GPT-2 / nanoGPT, with three choices made for the strategy modules:

* Named pieces: ``GPT.embed`` (:class:`GPTEmbedding`), ``GPT.blocks`` (a ``ModuleList`` of
  :class:`Block`) and ``GPT.head`` (:class:`GPTHead`). A pipeline stage is a slice of those;
  ``forward`` is nothing but ``head(blocks(embed(idx)))``.
* Separate ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` linears, so tensor parallelism
  can split q/k/v column-wise (whole heads per rank) and ``o_proj`` row-wise. Attention reads
  its head count from the weight shapes at run time, so a sharded copy runs unchanged.
* Initialisation under a private, seeded RNG: every process builds bit-identical weights
  without broadcasting them, and the caller's RNG stream is left untouched.

No parallelism lives here; strategies transform this module from outside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from mgpukit.data import VOCAB_SIZE


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Sizes of a GPT. ``d_ff`` is the MLP hidden width (GPT-2 uses ``4 * d_model``)."""

    vocab_size: int
    seq_len: int
    n_layer: int
    n_head: int
    d_model: int
    d_ff: int
    dropout: float = 0.0
    bias: bool = True  # biases on the linears, as in GPT-2

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "n_layer", "n_head", "d_model", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "choose d_model as a multiple of n_head (each head gets d_model // n_head dims)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout} must be in [0, 1); use 0.0 to disable it")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


def gpt_tiny(**overrides) -> GPTConfig:
    """~0.21 M parameters: one fwd+bwd at batch 8 takes about 10 ms on two CPU cores."""
    kw = dict(vocab_size=VOCAB_SIZE, seq_len=64, n_layer=4, n_head=4, d_model=64, d_ff=4 * 64)
    return GPTConfig(**{**kw, **overrides})


def gpt_small(**overrides) -> GPTConfig:
    """~6.4 M parameters: enough compute per step for overlap and scaling to show on GPUs
    (a fwd+bwd at batch 8 takes seconds on two CPU cores — use ``gpt_tiny`` there)."""
    kw = dict(vocab_size=VOCAB_SIZE, seq_len=256, n_layer=8, n_head=8, d_model=256, d_ff=4 * 256)
    return GPTConfig(**{**kw, **overrides})


# ---- real-scale shapes: fake tensors in shape mode (`mgpukit.measure.shape`), or real weights
# after the memory check (`mgpukit.fits`), trained on the shipped character-level corpus.
# The vocabulary is GPT-2's 50257 padded to 50304 (a multiple of 64, as nanoGPT does), so a
# vocab-parallel table splits over 8 ranks. The head is untied (see `GPTHead`): each model has
# vocab × d_model more parameters than its paper counts.


def gpt2_124m(**overrides) -> GPTConfig:
    """GPT-2 small (Radford et al. 2019): 12 layers, d 768, 12 heads, 1024 context
    (163 M parameters here, untied)."""
    kw = dict(vocab_size=50304, seq_len=1024, n_layer=12, n_head=12, d_model=768, d_ff=4 * 768)
    return GPTConfig(**{**kw, **overrides})


def gpt2_350m(**overrides) -> GPTConfig:
    """GPT-2 medium (Radford et al. 2019): 24 layers, d 1024, 16 heads (406 M here, untied)."""
    kw = dict(vocab_size=50304, seq_len=1024, n_layer=24, n_head=16, d_model=1024, d_ff=4 * 1024)
    return GPTConfig(**{**kw, **overrides})


def gpt2_1_3b(**overrides) -> GPTConfig:
    """GPT-3 XL's layers (Brown et al. 2020, Table 2.1: 24 layers, d 2048; 16 heads of 128 as
    `data/models/1.3b.toml`) with GPT-2's vocabulary and 1024 context (1.41 B here)."""
    kw = dict(vocab_size=50304, seq_len=1024, n_layer=24, n_head=16, d_model=2048, d_ff=4 * 2048)
    return GPTConfig(**{**kw, **overrides})


def llama_7b(**overrides) -> GPTConfig:
    """Llama-2 7B's sizes (Touvron et al. 2023: 32 layers, d 4096, 32 heads, 4k context, vocab
    32000, no biases) on this GPT's blocks: LayerNorm, learned positions and a GELU MLP instead
    of RMSNorm, rotary positions and SwiGLU. The MLP is 1.5 × 11008 = 16512 wide, so its two
    matrices hold as many weights — and cost as many FLOPs — as SwiGLU's three (6.76 B here)."""
    kw = dict(vocab_size=32000, seq_len=4096, n_layer=32, n_head=32, d_model=4096,
              d_ff=16512, bias=False)
    return GPTConfig(**{**kw, **overrides})


class GPTEmbedding(nn.Module):
    """Token embedding ``tok`` plus learned position embedding ``pos``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.pos.num_embeddings:
            raise ValueError(f"sequence of {T} tokens is longer than seq_len={self.pos.num_embeddings}")
        pos = torch.arange(T, device=idx.device)
        return self.drop(self.tok(idx) + self.pos(pos))  # (B, T, C)


class AttentionCore(nn.Module):
    """``softmax(q kᵀ / sqrt(hs)) v`` with a causal mask: the part of attention without weights.

    Its own (parameter-free) module so that a policy can treat it apart from the projections —
    selective activation checkpointing recomputes exactly this piece (Korthikanti et al. 2022).
    """

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = dropout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, nh, T, hs)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``F.scaled_dot_product_attention``.

    The number of heads is read from the width of q at every call: a tensor-parallel rank
    that holds only some heads' rows of q/k/v (and the matching columns of ``o_proj``) —
    ours or a DTensor-sharded one — computes exactly its heads' share, with no code change here.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.core = AttentionCore(cfg.dropout)
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.k_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.v_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # (B, T, C)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, nh*hs)
        n_head_local = q.shape[-1] // self.head_dim
        q = q.view(B, T, n_head_local, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, n_head_local, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, n_head_local, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        y = self.core(q, k, v)  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, n_head_local * self.head_dim)  # (B, T, nh*hs)
        return self.resid_drop(self.o_proj(y))  # (B, T, C)


class FeedForward(nn.Module):
    """``fc1`` -> GELU -> ``fc2``: tensor parallel splits fc1 by columns, fc2 by rows."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))  # (B, T, d_ff) inside, (B, T, C) out


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTHead(nn.Module):
    """Final LayerNorm ``ln_f`` and the output projection ``lm_head`` to vocabulary logits.

    ``lm_head`` is *not* tied to the token embedding: with tied weights the first and last
    pipeline stages would share a parameter and need an extra gradient all-reduce. Untied
    keeps every parameter on exactly one stage, at the cost of ``vocab_size * d_model`` more.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))  # (B, T, V)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of ``logits (B, T, V)`` against ``targets (B, T)``."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class GPT(nn.Module):
    """``embed`` -> ``blocks`` -> ``head``; ``forward(idx (B, T)) -> logits (B, T, V)``."""

    # what the appliers read of it (`models.layered.Layered`)
    layers_name, layer_kind, has_attention = "blocks", "transformer blocks", True

    def __init__(self, cfg: GPTConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        # A private RNG stream (CPU only: devices=[] so building a model never touches CUDA)
        # gives the same weights in every process and leaves the caller's RNG as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = GPTEmbedding(cfg)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
            self.head = GPTHead(cfg)
            self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        """GPT-2 init: N(0, 0.02) weights, zero biases, and the two projections that write
        into the residual stream (``o_proj``, ``fc2``) scaled by ``1/sqrt(2 * n_layer)`` so the
        residual's variance does not grow with depth."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.o_proj.weight, mean=0.0, std=resid_std)
            nn.init.normal_(block.mlp.fc2.weight, mean=0.0, std=resid_std)

    def repeated(self) -> nn.ModuleList:
        return self.blocks

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        return self.head(x)  # (B, T, V)

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Same as :func:`lm_loss`."""
        return lm_loss(logits, targets)

    def num_params(self) -> int:
        """Number of parameters (embeddings included; nothing is tied)."""
        return sum(p.numel() for p in self.parameters())
