"""Model shapes and exact parameter counts for decoder-only transformers.

A :class:`ModelShape` holds the sizes that decide parameters, FLOPs, activations and
communication. Two families are covered:

* GPT (Radford et al. 2019; Brown et al. 2020, "Language Models are Few-Shot Learners"):
  LayerNorm with bias, learned position embedding, biased linears, a 4·d MLP with GELU;
  Megatron-LM (Shoeybi et al. 2019) ties the output layer to the token embedding.
* Llama (Touvron et al. 2023; Dubey et al. 2024): RMSNorm, rotary positions (no table),
  no biases, SwiGLU MLP (three ``d x d_ff`` matrices), grouped-query attention
  (``n_kv_head`` < ``n_head``), untied output layer.

For the standard GPT layer the count is the familiar ``12·h² + 13·h`` per layer
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", §5.1). ``param_count(shape_of_gpt_tiny)`` equals
``sum(p.numel() for p in GPT(cfg).parameters())`` for mgpukit's own GPT.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """Sizes of a decoder-only transformer. ``seq_len`` is the training sequence length."""

    name: str = "custom"
    n_layer: int
    d_model: int
    n_head: int
    d_ff: int
    vocab: int
    seq_len: int
    n_kv_head: int | None = None  # None: multi-head attention (= n_head); fewer: GQA
    gated_mlp: bool = False  # SwiGLU: gate and up (d -> d_ff each), down (d_ff -> d)
    bias: bool = True  # biases on q/k/v/o and the MLP linears
    norm: str = "layernorm"  # "layernorm" (weight + bias) | "rmsnorm" (weight)
    learned_pos: bool = True  # a (seq_len, d_model) position table; False for rotary
    tied_embeddings: bool = False  # lm_head shares the token embedding's weight
    lm_head_bias: bool = False
    dropout: bool = False  # dropout layers store 1-byte masks (Korthikanti et al. 2022)

    def __post_init__(self) -> None:
        for f in ("n_layer", "d_model", "n_head", "d_ff", "vocab", "seq_len"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}={getattr(self, f)} must be a positive integer")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_head={self.n_head}")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={self.kv_heads}")
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r}; choose one of {', '.join(NORMS)}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def kv_dim(self) -> int:
        """Width of the k (and of the v) projection: ``n_kv_head · head_dim``."""
        return self.kv_heads * self.head_dim

    @classmethod
    def from_gpt_config(cls, cfg, *, name: str = "gpt", **overrides) -> "ModelShape":
        """Shape of mgpukit's GPT from its config (duck-typed: ``vocab_size, seq_len, n_layer,
        n_head, d_model, d_ff``, and ``bias``/``dropout`` when present). mgpukit's GPT has
        LayerNorm, a learned position table and an untied, bias-free ``lm_head``."""
        kw = dict(
            name=name,
            vocab=cfg.vocab_size,
            seq_len=cfg.seq_len,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            d_model=cfg.d_model,
            d_ff=cfg.d_ff,
            bias=bool(getattr(cfg, "bias", True)),
            dropout=bool(getattr(cfg, "dropout", 0.0)),
        )
        return cls(**{**kw, **overrides})

    def with_(self, **changes) -> "ModelShape":
        """A copy with some fields changed (``shape.with_(seq_len=8192)``)."""
        return replace(self, **changes)


# ------------------------------------------------------------------ parameter counts


def _norm_params(shape: ModelShape) -> int:
    return 2 * shape.d_model if shape.norm == "layernorm" else shape.d_model


def layer_matmul_params(shape: ModelShape) -> int:
    """Weights of one block's matrix multiplies (no biases, no norms): what FLOPs scale with."""
    d, f = shape.d_model, shape.d_ff
    attn = 2 * d * d + 2 * d * shape.kv_dim  # q, o: d x d; k, v: d x kv_dim
    mlp = (3 if shape.gated_mlp else 2) * d * f
    return attn + mlp


def layer_param_split(shape: ModelShape) -> tuple[int, int]:
    """One block's parameters as ``(split_by_tp, replicated_by_tp)``.

    Megatron's tensor parallelism splits q/k/v and fc1 (gate/up) by columns — weights and
    biases — and o/fc2 by rows — weights only: the row-parallel biases and the norms are
    replicated on every tp rank (Shoeybi et al. 2019, §3).
    """
    d, f = shape.d_model, shape.d_ff
    split = layer_matmul_params(shape)
    replicated = 2 * _norm_params(shape)
    if shape.bias:
        split += d + 2 * shape.kv_dim  # q, k, v biases (column-parallel)
        split += (2 if shape.gated_mlp else 1) * f  # fc1 (gate, up) biases
        replicated += 2 * d  # o and fc2 biases (row-parallel)
    return split, replicated


def layer_params(shape: ModelShape) -> int:
    """Parameters of one transformer block."""
    return sum(layer_param_split(shape))


def param_breakdown(shape: ModelShape) -> dict[str, int]:
    """Parameters by piece: ``embedding`` (token + position), ``layers``, ``head`` (final norm and,
    when untied, lm_head), and ``total``."""
    d = shape.d_model
    embedding = shape.vocab * d + (shape.seq_len * d if shape.learned_pos else 0)
    head = _norm_params(shape)
    if not shape.tied_embeddings:
        head += shape.vocab * d
    if shape.lm_head_bias:
        head += shape.vocab
    layers = shape.n_layer * layer_params(shape)
    return {"embedding": embedding, "layers": layers, "head": head, "total": embedding + layers + head}


def param_count(shape: ModelShape) -> int:
    """Total parameters Ψ (tied weights counted once)."""
    return param_breakdown(shape)["total"]


# ------------------------------------------------------------------------- presets


def gpt_tiny() -> ModelShape:
    """mgpukit's tiny GPT (``mgpukit.models.gpt.gpt_tiny``): ~0.2 M parameters."""
    return ModelShape(name="gpt-tiny", n_layer=4, d_model=64, n_head=4, d_ff=256, vocab=64, seq_len=64)


def _gpt3(name: str, n_layer: int, d_model: int, n_head: int) -> ModelShape:
    # Brown et al. 2020, Table 2.1; vocab 50257, context 2048, tied embeddings, dropout 0.1.
    return ModelShape(
        name=name, n_layer=n_layer, d_model=d_model, n_head=n_head, d_ff=4 * d_model,
        vocab=50257, seq_len=2048, tied_embeddings=True, dropout=True,
    )


def gpt3_125m() -> ModelShape:
    """GPT-3 Small (Brown et al. 2020, Table 2.1): 12 layers, d 768, 12 heads."""
    return _gpt3("125m", 12, 768, 12)


def gpt3_1_3b() -> ModelShape:
    """GPT-3 XL (Brown et al. 2020): 24 layers, d 2048; 16 heads of 128 (the table's 24 heads
    do not divide 2048; Megatron and OPT use head dim 128)."""
    return _gpt3("1.3b", 24, 2048, 16)


def gpt3_175b() -> ModelShape:
    """GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d 12288, 96 heads."""
    return _gpt3("175b", 96, 12288, 96)


def megatron_1t() -> ModelShape:
    """The 1T model of Narayanan et al. 2021 (Table 1): 128 layers, d 25600, 160 heads, vocab 51200."""
    return _gpt3("1t", 128, 25600, 160).with_(vocab=51200)


def _llama(name, n_layer, d_model, n_head, n_kv_head, d_ff, vocab, seq_len) -> ModelShape:
    return ModelShape(
        name=name, n_layer=n_layer, d_model=d_model, n_head=n_head, n_kv_head=n_kv_head, d_ff=d_ff,
        vocab=vocab, seq_len=seq_len, gated_mlp=True, bias=False, norm="rmsnorm", learned_pos=False,
    )


def llama2_7b() -> ModelShape:
    """Llama 2 7B (Touvron et al. 2023; HF config): 32 layers, d 4096, d_ff 11008, 4k context."""
    return _llama("7b", 32, 4096, 32, 32, 11008, 32000, 4096)


def llama2_13b() -> ModelShape:
    """Llama 2 13B: 40 layers, d 5120, 40 heads, d_ff 13824, 4k context."""
    return _llama("13b", 40, 5120, 40, 40, 13824, 32000, 4096)


def llama2_70b() -> ModelShape:
    """Llama 2 70B: 80 layers, d 8192, 64 heads, 8 kv heads (GQA), d_ff 28672, 4k context."""
    return _llama("70b", 80, 8192, 64, 8, 28672, 32000, 4096)


def llama3_405b() -> ModelShape:
    """Llama 3.1 405B (Dubey et al. 2024, Table 3): 126 layers, d 16384, 128 heads, 8 kv heads,
    d_ff 53248, vocab 128256, 8k pre-training context."""
    return _llama("405b", 126, 16384, 128, 8, 53248, 128256, 8192)


PRESETS = {
    "gpt-tiny": gpt_tiny,
    "125m": gpt3_125m,
    "1.3b": gpt3_1_3b,
    "7b": llama2_7b,
    "13b": llama2_13b,
    "70b": llama2_70b,
    "175b": gpt3_175b,
    "405b": llama3_405b,
    "1t": megatron_1t,
}


def list_shapes() -> list[str]:
    """Preset names, smallest first."""
    return list(PRESETS)


def get_shape(model: "str | ModelShape") -> ModelShape:
    """A preset by name, or ``model`` itself when it already is a :class:`ModelShape`."""
    if isinstance(model, ModelShape):
        return model
    try:
        return PRESETS[model.lower()]()
    except KeyError:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(PRESETS)}") from None
