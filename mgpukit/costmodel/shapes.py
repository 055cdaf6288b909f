"""Model shapes and exact parameter counts for decoder-only transformers.

A :class:`ModelShape` holds the sizes that decide parameters, FLOPs, activations and
communication. Two families are covered:

* GPT (Radford et al. 2019; Brown et al. 2020, "Language Models are Few-Shot Learners"):
  LayerNorm with bias, learned position embedding, biased linears, a 4·d MLP with GELU;
  Megatron-LM (Shoeybi et al. 2019) ties the output layer to the token embedding.
* Llama (Touvron et al. 2023; Dubey et al. 2024): RMSNorm, rotary positions (no table),
  no biases, SwiGLU MLP (three ``d x d_ff`` matrices), grouped-query attention
  (``n_kv_head`` < ``n_head``), untied output layer.
* Mixture of experts (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al.
  2021; Mixtral, Jiang et al. 2024): every block's MLP becomes ``n_expert`` MLPs of width
  ``expert_ffn`` and a router (``d × E``, no bias); each token runs ``top_k`` of them. The
  model **holds** all ``E`` experts (parameters, memory) but each token **computes** ``k``
  (:func:`layer_active_matmul_params`, FLOPs).

For the standard GPT layer the count is the familiar ``12·h² + 13·h`` per layer
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", §5.1). ``param_count(shape_of_gpt_tiny)`` equals
``sum(p.numel() for p in GPT(cfg).parameters())`` for mgpukit's own GPT.

Named models are files, one per model, in ``data/models/`` (``70b.toml``: ``layers = 80``,
``hidden = 8192``, ..., with the paper or config they come from): :func:`get_shape` reads
them, and a user's own file or the CLI's ``--layers --hidden ...`` make the same object.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

from mgpukit.costmodel.file_schema import BOOLEAN, INTEGER, NUMBER, STRING, Field, check_schema

NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """Sizes of a decoder-only transformer. ``seq_len`` is the training sequence length."""

    name: str = "custom"
    description: str = field(default="", compare=False)
    source: str = field(default="", compare=False)  # where the sizes come from (paper, table, config file)
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
    fused_qkv: bool = True  # q, k, v as one GEMM (Megatron-LM and most frameworks); mgpukit's GPT has three
    n_expert: int = 1  # MoE: experts per block (1: one dense MLP)
    top_k: int = 1  # experts each token is routed to
    expert_ffn: int | None = None  # each expert's inner width (None: d_ff)
    capacity_factor: float = 1.25  # slots per expert per sequence = ⌈f·k·s/E⌉ (Switch's 1.25; `cp_ep`)

    def __post_init__(self) -> None:
        for f in ("n_layer", "d_model", "n_head", "d_ff", "vocab", "seq_len"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}={getattr(self, f)} must be a positive integer")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_head={self.n_head}")
        if self.n_kv_head is not None and not (isinstance(self.n_kv_head, int) and 1 <= self.n_kv_head):
            raise ValueError(f"n_kv_head={self.n_kv_head!r} must be a whole number >= 1 (or None: = n_head)")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={self.kv_heads}")
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r}; choose one of {', '.join(NORMS)}")
        if not (isinstance(self.n_expert, int) and self.n_expert >= 1):
            raise ValueError(f"n_expert={self.n_expert!r} must be a whole number >= 1 (1: a dense MLP)")
        if not (isinstance(self.top_k, int) and 1 <= self.top_k <= self.n_expert):
            raise ValueError(f"top_k={self.top_k!r} must be between 1 and the number of experts ({self.n_expert}): "
                             f"each token picks top_k different experts")
        if self.expert_ffn is not None and not (isinstance(self.expert_ffn, int) and self.expert_ffn >= 1):
            raise ValueError(f"expert_ffn={self.expert_ffn!r} must be a whole number >= 1 (or None: = d_ff)")
        if self.expert_ffn is not None and self.n_expert == 1:
            raise ValueError(f"expert_ffn={self.expert_ffn} is each expert's width, but the model has one dense MLP "
                             f"(n_expert=1); give its width as ffn, or give the number of experts")
        if not (self.capacity_factor > 0 and math.isfinite(self.capacity_factor)):
            raise ValueError(f"capacity_factor={self.capacity_factor!r} must be > 0 (Switch's is 1.25)")

    def __hash__(self) -> int:
        # what dataclass would hash (the compared fields), computed once: the planner's caches key on the
        # shape, and a search hashes it ~10^6 times
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def is_moe(self) -> bool:
        """Routed experts instead of one MLP per block."""
        return self.n_expert > 1

    @property
    def mlp_width(self) -> int:
        """Inner width of each block's MLP, or of each expert."""
        return self.expert_ffn or self.d_ff

    @property
    def kv_dim(self) -> int:
        """Width of the k (and of the v) projection: ``n_kv_head · head_dim``."""
        return self.kv_heads * self.head_dim

    @classmethod
    def from_gpt_config(cls, cfg, *, name: str = "gpt", **overrides) -> "ModelShape":
        """Shape of mgpukit's GPT from its config (duck-typed: ``vocab_size, seq_len, n_layer,
        n_head, d_model, d_ff``, and ``bias``/``dropout`` when present; a MoE config's ``n_expert,
        top_k, capacity_factor``, its experts ``d_ff`` wide). mgpukit's GPT has
        LayerNorm, a learned position table, an untied, bias-free ``lm_head`` and separate q, k, v
        projections (three GEMMs, not one fused: `costmodel.steptime` charges them apart)."""
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
            fused_qkv=False,
        )
        if getattr(cfg, "n_expert", 1) > 1:
            kw.update(n_expert=cfg.n_expert, top_k=cfg.top_k, capacity_factor=cfg.capacity_factor)
        return cls(**{**kw, **overrides})

    def with_(self, **changes) -> "ModelShape":
        """A copy with some fields changed (``shape.with_(seq_len=8192)``)."""
        return replace(self, **changes)


# ------------------------------------------------------------------ parameter counts


def _norm_params(shape: ModelShape) -> int:
    return 2 * shape.d_model if shape.norm == "layernorm" else shape.d_model


def _mlp_matmul_params(shape: ModelShape) -> int:
    """Weights of one MLP (or one expert): two ``d × width`` matrices, three when gated."""
    return (3 if shape.gated_mlp else 2) * shape.d_model * shape.mlp_width


@lru_cache(maxsize=256)
def layer_matmul_params(shape: ModelShape) -> int:
    """Weights of one block's matrix multiplies (no biases, no norms), every expert included: what
    the block holds. What its FLOPs scale with is :func:`layer_active_matmul_params`."""
    d = shape.d_model
    attn = 2 * d * d + 2 * d * shape.kv_dim  # q, o: d x d; k, v: d x kv_dim
    if not shape.is_moe:
        return attn + _mlp_matmul_params(shape)
    return attn + d * shape.n_expert + shape.n_expert * _mlp_matmul_params(shape)  # router + E experts


@lru_cache(maxsize=256)
def layer_active_matmul_params(shape: ModelShape) -> int:
    """Weights one token multiplies by in one block: attention, the router and its ``top_k``
    experts (Mixtral: 13 B "active" of 47 B, Jiang et al. 2024 §2). The dense block: all."""
    if not shape.is_moe:
        return layer_matmul_params(shape)
    return layer_matmul_params(shape) - (shape.n_expert - shape.top_k) * _mlp_matmul_params(shape)


def _mlp_biases(shape: ModelShape) -> tuple[int, int]:
    """One MLP's (or expert's) biases as ``(split_by_tp, replicated_by_tp)``: fc1's (gate, up)
    column-parallel, fc2's row-parallel."""
    if not shape.bias:
        return 0, 0
    return (2 if shape.gated_mlp else 1) * shape.mlp_width, shape.d_model


@lru_cache(maxsize=256)
def layer_param_split(shape: ModelShape) -> tuple[int, int]:
    """One block's parameters outside the experts as ``(split_by_tp, replicated_by_tp)``.

    Megatron's tensor parallelism splits q/k/v and fc1 (gate/up) by columns — weights and
    biases — and o/fc2 by rows — weights only: the row-parallel biases and the norms are
    replicated on every tp rank (Shoeybi et al. 2019, §3). In a MoE block the router (``d × E``)
    is replicated and the experts are :func:`layer_expert_split`'s.
    """
    d = shape.d_model
    split = 2 * d * d + 2 * d * shape.kv_dim
    replicated = 2 * _norm_params(shape)
    if shape.bias:
        split += d + 2 * shape.kv_dim  # q, k, v biases (column-parallel)
        replicated += d  # o's bias (row-parallel)
    if shape.is_moe:
        replicated += d * shape.n_expert  # the router
    else:
        mlp_split, mlp_replicated = _mlp_biases(shape)
        split += _mlp_matmul_params(shape) + mlp_split
        replicated += mlp_replicated
    return split, replicated


@lru_cache(maxsize=256)
def layer_expert_split(shape: ModelShape) -> tuple[int, int]:
    """All ``E`` experts of one block as ``(split_by_tp, replicated_by_tp)`` (each expert split
    like a dense MLP: Megatron-Core's expert tensor parallelism equal to tp); expert parallelism
    then gives each of ``ep`` ranks ``1/ep`` of both. ``(0, 0)`` for a dense block."""
    if not shape.is_moe:
        return 0, 0
    split, replicated = _mlp_biases(shape)
    return shape.n_expert * (_mlp_matmul_params(shape) + split), shape.n_expert * replicated


@lru_cache(maxsize=256)
def layer_params(shape: ModelShape) -> int:
    """Parameters of one transformer block (every expert)."""
    return sum(layer_param_split(shape)) + sum(layer_expert_split(shape))


@lru_cache(maxsize=256)
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
    """Total parameters Ψ (tied weights counted once; every expert)."""
    return param_breakdown(shape)["total"]


def active_param_count(shape: ModelShape) -> int:
    """Parameters one token passes through: Ψ less the ``E − k`` experts it skips in every block."""
    idle = shape.n_expert - shape.top_k
    split, replicated = layer_expert_split(shape)
    return param_count(shape) - shape.n_layer * idle * (split + replicated) // shape.n_expert


# ------------------------------------------------------------------- model files

# A model file (``data/models/NAME.toml``, or any path) names the sizes with the CLI's words:
# ``mgpukit plan --layers 70 --hidden 14336 ...`` and ``layers = 70`` in a file mean the same.
FILE_KEYS = {  # file key -> ModelShape field
    "name": "name", "description": "description", "source": "source",
    "layers": "n_layer", "hidden": "d_model", "heads": "n_head", "kv_heads": "n_kv_head", "ffn": "d_ff",
    "vocab": "vocab", "seq": "seq_len", "gated_mlp": "gated_mlp", "bias": "bias", "norm": "norm",
    "tied_embeddings": "tied_embeddings", "lm_head_bias": "lm_head_bias", "dropout": "dropout",
    "fused_qkv": "fused_qkv", "experts": "n_expert", "top_k": "top_k", "expert_ffn": "expert_ffn",
    "capacity_factor": "capacity_factor",
}
POSITIONS = ("learned", "rotary", "alibi")  # only "learned" has a (seq_len, d_model) table
REQUIRED = ("layers", "hidden", "heads", "vocab", "seq")
# Sane maxima (`file_schema`): about 30x the largest published model's (1T GPT: 128 layers,
# hidden 25,600, ffn 102,400; Llama 3: vocab 128K; context windows of 10M tokens), wide
# enough for any experiment and narrow enough that `plan --search` answers in seconds (2^63
# layers used to search for hours)
MAX_LAYERS, MAX_HIDDEN, MAX_FFN, MAX_VOCAB, MAX_SEQ = 4096, 2**17, 2**19, 2**24, 2**24
MAX_EXPERTS = 4096  # DeepSeek-V3 routes over 256 (arXiv:2412.19437 §4.2); 16x that
_SIZE = {"layers": MAX_LAYERS, "hidden": MAX_HIDDEN, "heads": MAX_HIDDEN, "kv_heads": MAX_HIDDEN,
         "ffn": MAX_FFN, "vocab": MAX_VOCAB, "seq": MAX_SEQ, "experts": MAX_EXPERTS, "top_k": MAX_EXPERTS,
         "expert_ffn": MAX_FFN}
_BOOLS = ("gated_mlp", "bias", "tied_embeddings", "lm_head_bias", "dropout", "fused_qkv")
SCHEMA = {
    "name": Field(STRING, 1, 200), "description": Field(STRING, 0, 10_000), "source": Field(STRING, 0, 10_000),
    **{k: Field(INTEGER, 1, high, required=k in REQUIRED) for k, high in _SIZE.items()},
    **{k: Field(BOOLEAN) for k in _BOOLS},
    "norm": Field(STRING, choices=NORMS), "positions": Field(STRING, choices=POSITIONS),
    "capacity_factor": Field(NUMBER, 0, 1000, low_open=True),
}


def models_dir() -> Path:
    """Where the shipped model files live: ``<repo>/data/models`` (the one home of the presets)."""
    return Path(__file__).resolve().parents[2] / "data" / "models"


def shape_from_dict(d: dict, *, where: str = "model") -> ModelShape:
    """A :class:`ModelShape` from a model file's keys (``FILE_KEYS``, plus ``positions``:
    learned | rotary | alibi). ``ffn`` defaults to ``4·hidden``. Raises ValueError with one line
    saying which key is wrong and what to write."""
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)} (a model needs {', '.join(REQUIRED)}; ffn "
                         f"defaults to 4 × hidden)")
    try:
        check_schema(d, SCHEMA, what="a model file")  # kinds, ranges, unknown keys: one line naming the key
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    positions = d.get("positions", "learned")
    kw = {FILE_KEYS[k]: v for k, v in d.items() if k in FILE_KEYS}
    kw.setdefault("d_ff", 4 * d["hidden"])
    kw.setdefault("name", "custom")
    try:
        return ModelShape(learned_pos=positions == "learned", **kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


def shape_to_dict(shape: ModelShape) -> dict:
    """The inverse of :func:`shape_from_dict`: a model file's keys for ``shape``."""
    back = {f: k for k, f in FILE_KEYS.items()}
    moe = ("n_expert", "top_k", "expert_ffn", "capacity_factor")  # a dense model's file has none of them
    out = {back[f]: getattr(shape, f) for f in back
           if getattr(shape, f) is not None and (shape.is_moe or f not in moe)}
    out["positions"] = "learned" if shape.learned_pos else "rotary"
    return out


def load_model_file(path: "str | Path") -> ModelShape:
    """Read one model file (TOML); the file's stem is the name unless it sets ``name``."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"no model file at {path}; write one like data/models/70b.toml")
    try:
        with open(path, "rb") as f:
            d = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"model file {path}: not valid TOML ({e})") from None
    d.setdefault("name", path.stem)
    return shape_from_dict(d, where=f"model file {path}")


@lru_cache(maxsize=None)
def _shipped() -> dict[str, ModelShape]:
    return {p.stem: load_model_file(p) for p in sorted(models_dir().glob("*.toml"))}


def list_shapes() -> list[str]:
    """Names of the shipped model files, smallest first (by parameter count)."""
    models = _shipped()
    return sorted(models, key=lambda n: param_count(models[n]))


def get_shape(model: "str | Path | ModelShape") -> ModelShape:
    """``model`` itself when it is a :class:`ModelShape`; a shipped model by name
    (``data/models/<name>.toml``); or a path to a model file."""
    if isinstance(model, ModelShape):
        return model
    text = str(model)
    if text.endswith(".toml") or "/" in text:
        return load_model_file(text)
    try:
        return _shipped()[text.lower()]
    except KeyError:
        raise ValueError(f"unknown model {text!r}; choose one of {', '.join(list_shapes())}, or give a model "
                         f"file (--model-file my.toml) or the sizes (--layers --hidden --heads --vocab --seq)") from None
