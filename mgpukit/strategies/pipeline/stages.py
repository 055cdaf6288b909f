"""Cutting a model into pipeline stages: contiguous slices of its layers, one module each.

A pipeline with ``p`` ranks and ``v`` chunks per rank has ``p·v`` *stages* (virtual stages
when ``v > 1``); stage ``s`` lives on rank ``s % p``. Stage 0 also holds the GPT's embedding
and the last stage its head (final LayerNorm, vocabulary projection) — so with the GPT the
first and last stages do a little more work than the others, and the "equal stage cost" of
the textbook bubble formulas only holds approximately (see ``mgpukit.lessons.pipeline_lab``
for a model whose stages really are equal).

Each stage keeps the full model's attribute names: a stage holding blocks 2 and 3 stores them
as ``blocks["2"]`` and ``blocks["3"]`` in a ``ModuleDict``, so its ``state_dict()`` keys are
exactly the full model's (``blocks.2.attn.q_proj.weight``). Gathering the stages' state dicts
on rank 0 and merging them gives the unsharded model's weights, names and all — what parity
with the single-process reference needs.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from mgpukit.costmodel.layout import divisors
from mgpukit.models.layered import Layered


def _layer_source(model: Layered) -> tuple[str, nn.ModuleList, str]:
    """(attribute name of the repeated layers, the layers, what to call one in messages): what
    the model declares (`models.layered.Layered`; GPT: embed -> blocks -> head, MLP: layers)."""
    return model.layers_name, model.repeated(), model.layer_kind


def check_split(n_layers: int, p: int, v: int = 1, *, model_name: str = "the model",
                what: str = "layers") -> None:
    """Refuse, with what to change, a model whose layers don't divide into ``p·v`` stages."""
    stages = p * v
    if n_layers % stages == 0:
        return
    ok_v = [d // p for d in divisors(n_layers) if d % p == 0]
    ok_p = [d for d in divisors(n_layers) if n_layers % (d * v) == 0]
    chunks = f" × v={v} chunks per rank" if v > 1 else ""
    hint = (f"use a number of pipeline ranks that divides it: workers in {ok_p}"
            + (f" (with v={v})" if v > 1 else ""))
    if v > 1 and ok_v:
        hint += f", or v in {ok_v} with {p} workers"
    raise ValueError(f"{model_name} has {n_layers} {what}, which cannot be cut into {stages} equal "
                     f"pipeline stages (p={p} ranks{chunks}); every stage must hold the same "
                     f"number of {what}. {hint[0].upper()}{hint[1:]}.")


def check_stage_layers(stage_layers, n_layers: int, num_stages: int, *, what: str = "layers") -> None:
    """Refuse, with what to change, an uneven split that does not cover the model exactly."""
    counts = tuple(stage_layers)
    if (len(counts) != num_stages or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts)
            or sum(counts) != n_layers):
        raise ValueError(f"stage_layers={counts!r}: give {num_stages} positive whole numbers (one per "
                         f"pipeline stage, v=1) that add up to the model's {n_layers} {what}.")


class Stage(nn.Module):
    """A contiguous slice of a GPT or MLP: ``[embed] -> layers[first:last] -> [head]``.

    ``forward(x)`` takes token ids (stage 0 of a GPT) or the previous stage's output
    ``(B, T, C)`` / ``(B, d_hidden)``, and returns this stage's output (logits on the last
    GPT stage). Parameter names are the full model's (module docstring).
    """

    def __init__(self, *, index: int, num_stages: int, layers_name: str,
                 layers: dict[int, nn.Module], embed: nn.Module | None = None,
                 head: nn.Module | None = None):
        super().__init__()
        self.index, self.num_stages = index, num_stages
        self.layers_name = layers_name
        # the full model's names: `embed.*`, `blocks.3.*`, `head.*` (None: not on this stage)
        self.embed = embed
        setattr(self, layers_name, nn.ModuleDict({str(i): m for i, m in layers.items()}))
        self.head = head

    def layers_dict(self) -> nn.ModuleDict:
        """This stage's layers, keyed by their index in the full model."""
        return getattr(self, self.layers_name)  # the full model's attribute name (`Layered.layers_name`)

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.num_stages - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)  # (B, T) ids -> (B, T, C)
        for layer in self.layers_dict().values():
            x = layer(x)  # (B, T, C) or (B, d_hidden)
        if self.head is not None:
            x = self.head(x)  # (B, T, V)
        return x


def split_model(model: Layered, num_stages: int, *, keep=None,
                stage_layers: tuple[int, ...] | None = None) -> dict[int, Stage]:
    """Cut ``model`` into ``num_stages`` contiguous stages: equal numbers of layers, or
    ``stage_layers[s]`` layers on stage ``s`` (an uneven split that balances the stages' costs
    when the first holds the embedding and the last the head — Megatron-LM's
    ``--pipeline-model-parallel-layout``, Llama 3's shorter first and last stages).

    ``keep`` (a set of stage indices, default all) selects which stages to build — a rank
    builds only its own, and the other layers are simply dropped with the full model.
    """
    name, layers, what = _layer_source(model)
    n = len(layers)
    if stage_layers is None:
        if n % num_stages:
            check_split(n, num_stages, 1, model_name=type(model).__name__, what=what)
        stage_layers = (n // num_stages,) * num_stages
    check_stage_layers(stage_layers, n, num_stages, what=what)
    starts = [sum(stage_layers[:s]) for s in range(num_stages + 1)]
    keep = set(range(num_stages)) if keep is None else set(keep)
    out = {}
    for s in sorted(keep):
        out[s] = Stage(index=s, num_stages=num_stages, layers_name=name,
                       layers={i: layers[i] for i in range(starts[s], starts[s + 1])},
                       embed=model.embed if s == 0 else None,
                       head=model.head if s == num_stages - 1 else None)
    return out


def boundary_shape(model: Layered, micro_batch_size: int, *, seq_shards: int = 1) -> tuple[int, ...]:
    """Shape of the tensor passed between stages (activations forward, their grads backward).
    ``seq_shards``: a GPT's residual stream split along the sequence over that many ranks
    (tensor parallelism with sequence parallelism: each tp rank holds ``T/t`` tokens)."""
    cfg = model.cfg
    if model.has_attention:  # a GPT's residual stream
        if cfg.seq_len % seq_shards:
            raise ValueError(f"seq_len={cfg.seq_len} is not divisible by the {seq_shards} sequence shards")
        return (micro_batch_size, cfg.seq_len // seq_shards, cfg.d_model)  # (B, T/t, C)
    return (micro_batch_size, cfg.d_hidden)  # (B, d_hidden)
