"""How a training run is laid out on the GPUs: the 3D-parallel degrees and their options.

``dp × tp × pp`` GPUs (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM"): tensor parallelism inside a layer, pipeline parallelism
across layers, data parallelism across replicas, optionally sharded with ZeRO stage 1-3
(Rajbhandari et al. 2020). Ranks are ordered as in Megatron-LM: tp fastest, then dp, then pp,
so a tp group is ``tp`` consecutive ranks (one node when tp ≤ GPUs per node). Context
parallelism (``cp``, ring attention: Liu et al. 2023, "Ring Attention with Blockwise
Transformers"; Megatron-Core's ``context_parallel_size``) splits every sequence over ``cp``
ranks and sits between tp and dp in the rank order (tp, cp, dp, pp), so the world is
``dp × cp × tp × pp``. Expert parallelism (``ep``: Lepikhin et al. 2020, GShard; Fedus et al.
2021, Switch) splits each MoE layer's experts over ``ep`` ranks that are data-parallel for
every other weight, so the world is ``dp × ep × …`` with ``dp`` counting the copies of each
expert (DeepSpeed-MoE's expert-data-parallel degree).

Pipeline stages hold ``n_layer / pp`` layers each unless ``stage_layers`` lists them (uneven
stages, e.g. one layer fewer on the first and last stage, which also hold the embedding and
the loss, as Llama 3 did; Dubey et al. 2024, §3.3.2). With the interleaved schedule every
stage's layers split into ``v`` equal chunks, except that the first and the last stage may hold
one layer fewer: their first (last) chunk is one layer short, next to the embedding (the head
and loss) — with one layer per chunk it keeps only those, Llama 3's balancing: "the first model
chunk on the first stage has only the embedding" (§3.3.2). The time model treats the short
chunk like the others (fill and drain ``1/v`` of a stage).

The global batch is ``dp · micro_batch · num_micro_batches`` sequences: each data-parallel
replica runs ``num_micro_batches`` micro-batches (through the pipeline, or one after the
other as gradient accumulation when ``pp == 1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mgpukit.costmodel.actions import SCHEDULES
from mgpukit.costmodel.flops import CHECKPOINTING

# bytes of a stored weight, gradient or activation. fp8 is fp8 *GEMMs* (NVIDIA Transformer Engine's
# recipe: operands cast to fp8 per GEMM, weights, activations and gradients kept in 16 bits)
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}


class LayoutError(ValueError):
    """A layout that cannot run; the message says what to change."""


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending: the degrees a size can be split into.
    Found in pairs (d, n // d) up to sqrt(n): a billion GPUs take 31,623 trials, not 10^9."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Parallel degrees and options of one run (see the module docstring)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0  # ZeRO stage 0-3 over the dp group
    sp: bool = False  # Megatron sequence parallelism (with tp > 1)
    schedule: str = "1f1b"  # naive | gpipe | 1f1b | interleaved | zb-h1
    v: int = 1  # model chunks per pipeline rank (interleaved only)
    micro_batch: int = 1  # sequences per micro-batch
    num_micro_batches: int = 1  # per data-parallel replica per step
    checkpointing: str = "none"  # none | selective | full
    dtype: str = "bf16"  # bf16 / fp16: mixed precision with fp32 master weights; fp8: + fp8 GEMMs; fp32: plain
    cp: int = 1  # context parallelism: each sequence split over cp ranks (ring attention)
    ep: int = 1  # expert parallelism: each MoE layer's experts split over ep ranks (all-to-all)
    stage_layers: tuple[int, ...] | None = None  # layers per pipeline stage; None: n_layer / pp each
    tp_overlap: bool = False  # tp collectives overlapped with the layer's GEMMs (comm/compute overlap)
    # Fused attention (FlashAttention, Dao et al. 2022; PyTorch's SDPA): no s×s scores in HBM, so
    # activations keep one log-sum-exp per row instead (costmodel.memory). False: Megatron-2021 softmax
    flash_attention: bool = True
    # Which fused kernel (costmodel.attention_kernels): "" the profile's own, "fa2" (2023), "fa3" (Hopper)
    attention_kernel: str = ""

    def __post_init__(self) -> None:
        if self.attention_kernel not in ("", "fa2", "fa3"):
            raise LayoutError(f"attention_kernel={self.attention_kernel!r}; choose fa2 or fa3, or '' for the "
                              f"profile's own")
        for f in ("dp", "tp", "pp", "cp", "ep", "v", "micro_batch", "num_micro_batches"):
            value = getattr(self, f)
            if not isinstance(value, int) or value < 1:
                raise LayoutError(f"{f}={value!r} must be a positive integer")
        if self.zero not in (0, 1, 2, 3):
            raise LayoutError(f"zero={self.zero!r} is not a ZeRO stage; use 0 (plain DP), 1, 2 or 3")
        if self.schedule not in SCHEDULES:
            raise LayoutError(f"schedule={self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.checkpointing not in CHECKPOINTING:
            raise LayoutError(f"checkpointing={self.checkpointing!r}; choose one of {', '.join(CHECKPOINTING)}")
        if self.dtype not in DTYPE_BYTES:
            raise LayoutError(f"dtype={self.dtype!r}; choose one of {', '.join(DTYPE_BYTES)}")
        if self.v > 1 and self.schedule != "interleaved":
            raise LayoutError(f"v={self.v} model chunks per rank needs schedule='interleaved'; set v=1 "
                              f"or switch the schedule to 'interleaved'")
        if self.stage_layers is not None:
            layers = tuple(self.stage_layers)
            if len(layers) != self.pp or any(not isinstance(n, int) or n < 1 for n in layers):
                raise LayoutError(f"stage_layers={self.stage_layers!r} must list pp={self.pp} positive layer counts, "
                                  f"one per pipeline stage")
            object.__setattr__(self, "stage_layers", layers)
        if self.schedule == "interleaved" and (self.v < 2 or self.pp < 2):
            raise LayoutError(f"the interleaved schedule needs pp >= 2 and v >= 2 chunks per rank "
                              f"(got pp={self.pp}, v={self.v}); with v=1 it is plain 1f1b")

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.ep * self.tp * self.pp

    def layers_of_stage(self, n_layer: int, stage: int) -> int:
        """Transformer layers on pipeline ``stage``: ``stage_layers[stage]``, or ``n_layer / pp``."""
        if self.stage_layers is not None:
            return self.stage_layers[stage]
        return n_layer // self.pp

    def distinct_stages(self, n_layer: int) -> list[int]:
        """One stage per distinct (layer count, holds the embedding, holds the head) — the first
        of each, which also holds the most micro-batches in flight: the stages whose memory,
        parameters or time can differ. ``pp`` stages are O(1) distinct ones, so a 64-stage
        pipeline costs a planner no more than a 4-stage one."""
        if self.stage_layers is None:  # equal stages: the first, one in the middle, the last
            return sorted({0, min(1, self.pp - 1), self.pp - 1})
        seen, out = set(), []
        for s in range(self.pp):
            key = (self.layers_of_stage(n_layer, s), s == 0, s == self.pp - 1)
            if key not in seen:
                seen.add(key)
                out.append(s)
        return out

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all replicas (with ep, its ranks read their own
        sequences: they are data-parallel outside the experts)."""
        return self.dp * self.ep * self.micro_batch * self.num_micro_batches

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @classmethod
    def from_global_batch(cls, *, global_batch: int, dp: int = 1, micro_batch: int = 1, **kw) -> "Layout":
        """A layout whose ``num_micro_batches`` makes ``dp · ep · micro_batch · m == global_batch``
        (the ep ranks read their own sequences)."""
        ep = kw.get("ep", 1)
        per_replica = dp * ep * micro_batch
        if global_batch % per_replica:
            what, of = ("dp × ep × micro_batch", f"{dp} × {ep} × {micro_batch}") if ep > 1 else \
                ("dp × micro_batch", f"{dp} × {micro_batch}")
            raise LayoutError(
                f"global batch {global_batch} is not a multiple of {what} = {of}; "
                f"choose a global batch that is (e.g. {max(1, round(global_batch / per_replica)) * per_replica})"
            )
        return cls(dp=dp, micro_batch=micro_batch, num_micro_batches=global_batch // per_replica, **kw)

    @classmethod
    def on_gpus(cls, gpus: int, *, dp: int | None = None, tp: int | None = None, pp: int | None = None,
                cp: int | None = None, ep: int | None = None, sp: bool | None = None,
                schedule: str | None = None,
                v: int | None = None, checkpointing: str | None = None, dtype: str | None = None,
                global_batch: int | None = None, micro_batches: int | None = None,
                **fields) -> "Layout":
        """The layout a plan on ``gpus`` GPUs asks for, the rest filled in: the one resolver of
        the planner's layouts (``mgpukit plan``'s flags, notebook 09's explorer). A degree left
        out is 1 and dp fills the GPUs the others leave; sp comes with tp; the interleaved
        schedule takes v=2 chunks; a policy left out is the field's default (1f1b, no
        checkpointing, bf16); the micro-batches come from the global batch, else 4·pp
        (1 without a pipeline). ``fields``: any other field (``zero``, ``micro_batch`` …).
        ``mgpukit run``'s layouts are resolved against a strategy (`mgpukit.prepare.resolve_layout`)."""
        tp, pp, cp, ep = tp or 1, pp or 1, cp or 1, ep or 1
        if dp is None and gpus % (tp * pp * cp * ep):
            what = "tp × pp" + (" × cp" if cp > 1 else "") + (" × ep" if ep > 1 else "")
            raise LayoutError(f"{what} = {tp * pp * cp * ep} does not divide --gpus {gpus}; "
                              f"choose degrees whose product does")
        policies = {k: x for k, x in (("schedule", schedule), ("checkpointing", checkpointing),
                                      ("dtype", dtype)) if x is not None}  # else the field's default
        kw = dict(dp=gpus // (tp * pp * cp * ep) if dp is None else dp, tp=tp, pp=pp, cp=cp, ep=ep,
                  sp=(tp > 1) if sp is None else sp,
                  v=(2 if schedule == "interleaved" else 1) if v is None else v, **policies, **fields)
        if global_batch is not None:
            return cls.from_global_batch(global_batch=global_batch, **kw)
        m = micro_batches if micro_batches is not None else (4 * pp if pp > 1 else 1)
        return cls(num_micro_batches=m, **kw)

    def describe(self) -> str:
        """One line: ``dp 8 × tp 8 × pp 1, ZeRO-1, SP, micro-batch 1 × 64 micro-batches × dp 8 =
        global batch 512, ckpt selective, bf16`` (teacher4: the product left out dp)."""
        cp = f" × cp {self.cp}" if self.cp > 1 else ""
        cp += f" × ep {self.ep}" if self.ep > 1 else ""
        parts = [f"dp {self.dp}{cp} × tp {self.tp} × pp {self.pp}", f"ZeRO-{self.zero}"]
        if self.sp and self.tp > 1:
            parts.append("SP")
        if self.pp > 1:
            parts.append(self.schedule + (f" v={self.v}" if self.v > 1 else ""))
            if self.stage_layers is not None:
                parts.append("stages " + "/".join(map(str, self.stage_layers)))
        if self.tp_overlap and self.tp > 1:
            parts.append("tp overlap")
        ep = f" × ep {self.ep}" if self.ep > 1 else ""
        parts.append(f"micro-batch {self.micro_batch} × {self.num_micro_batches} micro-batches × dp {self.dp}{ep}"
                     f" = global batch {self.global_batch}")
        parts.append(f"ckpt {self.checkpointing}")
        if not self.flash_attention:
            parts.append("unfused attention")
        elif self.attention_kernel:
            parts.append(f"attention {self.attention_kernel}")
        parts.append(self.dtype)
        return ", ".join(parts)


def check_layout(shape, layout: Layout, *, gpus: int | None = None) -> None:
    """Refuse a layout that cannot run ``shape`` on ``gpus`` GPUs, saying what to change."""
    if gpus is not None and layout.world_size != gpus:
        rest = layout.tp * layout.pp * layout.cp * layout.ep
        cp, cpv = (" × cp", f" × {layout.cp}") if layout.cp > 1 else ("", "")
        if layout.ep > 1:
            cp, cpv = cp + " × ep", cpv + f" × {layout.ep}"
        hint = (f"use dp = {gpus // rest}" if gpus % rest == 0
                else f"pick tp × pp{cp} dividing {gpus} (tp × pp{cp} = {rest} does not)")
        raise LayoutError(f"dp{cp} × tp × pp = {layout.dp}{cpv} × {layout.tp} × {layout.pp} = {layout.world_size}, "
                          f"but there are {gpus} GPUs; {hint}")
    if layout.ep > 1 and shape.n_expert == 1:
        raise LayoutError(f"ep={layout.ep} splits a model's experts, but {shape.name} has none (one dense MLP per "
                          f"block); use ep 1, or a mixture of experts (--experts E --top-k K, or a model file "
                          f"with experts)")
    if shape.n_expert % layout.ep:
        raise LayoutError(f"ep={layout.ep} must divide the experts ({shape.n_expert}) so each rank holds whole "
                          f"experts; choose ep in {divisors(shape.n_expert)}")
    if shape.seq_len % layout.cp:
        raise LayoutError(f"cp={layout.cp} must divide seq_len={shape.seq_len} so each rank holds an equal "
                          f"slice of every sequence; choose cp in {divisors(shape.seq_len)[:8]}")
    heads = _gcd(shape.n_head, shape.kv_heads)
    if heads % layout.tp:
        what = f"n_head={shape.n_head}" + (f" and n_kv_head={shape.kv_heads}" if shape.kv_heads != shape.n_head else "")
        raise LayoutError(f"tp={layout.tp} must divide {what} so each tp rank holds whole heads; "
                          f"choose tp in {divisors(heads)}")
    if layout.stage_layers is not None:
        if sum(layout.stage_layers) != shape.n_layer:
            raise LayoutError(f"stage_layers={'/'.join(map(str, layout.stage_layers))} hold "
                              f"{sum(layout.stage_layers)} layers but the model has n_layer={shape.n_layer}; "
                              f"make them add up")
        if layout.schedule == "interleaved":
            last = layout.pp - 1
            bad = [s for s, n in enumerate(layout.stage_layers)
                   if n % layout.v and not (s in (0, last) and (n + 1) % layout.v == 0)]
            if bad:
                raise LayoutError(
                    f"interleaved with v={layout.v} needs every stage's layer count divisible by v (the first "
                    f"and the last stage may hold one fewer: that chunk keeps only the embedding or the head); "
                    f"got stage_layers={'/'.join(map(str, layout.stage_layers))}, stage {bad[0]} does not")
    elif shape.n_layer % layout.pp:
        raise LayoutError(f"pp={layout.pp} must divide n_layer={shape.n_layer} so every stage gets the same "
                          f"number of layers; choose pp in {divisors(shape.n_layer)}")
    if layout.schedule == "interleaved":
        chunks = layout.pp * layout.v
        if layout.stage_layers is None and shape.n_layer % chunks:
            ok = [v for v in divisors(shape.n_layer // layout.pp) if v >= 2]
            raise LayoutError(f"interleaved with pp={layout.pp}, v={layout.v} needs n_layer={shape.n_layer} "
                              f"divisible by pp × v = {chunks}; choose v in {ok or 'none: use 1f1b'}")
        if layout.num_micro_batches % layout.pp:
            m, p = layout.num_micro_batches, layout.pp
            raise LayoutError(f"interleaved needs the number of micro-batches to be a multiple of pp (as in "
                              f"Megatron-LM); got {m} with pp={p}: use {max(p, m // p * p)} or {(m // p + 1) * p}")


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a
