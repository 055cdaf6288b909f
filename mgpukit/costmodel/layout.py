"""How a training run is laid out on the GPUs: the 3D-parallel degrees and their options.

``dp × tp × pp`` GPUs (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM"): tensor parallelism inside a layer, pipeline parallelism
across layers, data parallelism across replicas, optionally sharded with ZeRO stage 1-3
(Rajbhandari et al. 2020). Ranks are ordered as in Megatron-LM: tp fastest, then dp, then pp,
so a tp group is ``tp`` consecutive ranks (one node when tp ≤ GPUs per node).

The global batch is ``dp · micro_batch · num_micro_batches`` sequences: each data-parallel
replica runs ``num_micro_batches`` micro-batches (through the pipeline, or one after the
other as gradient accumulation when ``pp == 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mgpukit.costmodel.actions import SCHEDULES
from mgpukit.costmodel.flops import CHECKPOINTING

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


class LayoutError(ValueError):
    """A layout that cannot run; the message says what to change."""


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending: the degrees a size can be split into."""
    return [d for d in range(1, n + 1) if n % d == 0]


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
    dtype: str = "bf16"  # bf16 / fp16: mixed precision with fp32 master weights; fp32: plain

    def __post_init__(self) -> None:
        for f in ("dp", "tp", "pp", "v", "micro_batch", "num_micro_batches"):
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
        if self.schedule == "interleaved" and (self.v < 2 or self.pp < 2):
            raise LayoutError(f"the interleaved schedule needs pp >= 2 and v >= 2 chunks per rank "
                              f"(got pp={self.pp}, v={self.v}); with v=1 it is plain 1f1b")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all replicas."""
        return self.dp * self.micro_batch * self.num_micro_batches

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @classmethod
    def from_global_batch(cls, *, global_batch: int, dp: int = 1, micro_batch: int = 1, **kw) -> "Layout":
        """A layout whose ``num_micro_batches`` makes ``dp · micro_batch · m == global_batch``."""
        per_replica = dp * micro_batch
        if global_batch % per_replica:
            raise LayoutError(
                f"global batch {global_batch} is not a multiple of dp × micro_batch = {dp} × {micro_batch}; "
                f"choose a global batch that is (e.g. {max(1, round(global_batch / per_replica)) * per_replica})"
            )
        return cls(dp=dp, micro_batch=micro_batch, num_micro_batches=global_batch // per_replica, **kw)

    def describe(self) -> str:
        """One line: ``dp 8 × tp 8 × pp 1, ZeRO-1, SP, 1f1b, mb 1 × 64 = 512, ckpt selective, bf16``."""
        parts = [f"dp {self.dp} × tp {self.tp} × pp {self.pp}", f"ZeRO-{self.zero}"]
        if self.sp and self.tp > 1:
            parts.append("SP")
        if self.pp > 1:
            parts.append(self.schedule + (f" v={self.v}" if self.v > 1 else ""))
        parts.append(f"micro-batch {self.micro_batch} × {self.num_micro_batches} = global batch {self.global_batch}")
        parts.append(f"ckpt {self.checkpointing}")
        parts.append(self.dtype)
        return ", ".join(parts)


def check_layout(shape, layout: Layout, *, gpus: int | None = None) -> None:
    """Refuse a layout that cannot run ``shape`` on ``gpus`` GPUs, saying what to change."""
    if gpus is not None and layout.world_size != gpus:
        rest = layout.tp * layout.pp
        hint = (f"use dp = {gpus // rest}" if gpus % rest == 0
                else f"pick tp × pp dividing {gpus} (tp × pp = {rest} does not)")
        raise LayoutError(f"dp × tp × pp = {layout.dp} × {layout.tp} × {layout.pp} = {layout.world_size}, "
                          f"but there are {gpus} GPUs; {hint}")
    heads = _gcd(shape.n_head, shape.kv_heads)
    if heads % layout.tp:
        what = f"n_head={shape.n_head}" + (f" and n_kv_head={shape.kv_heads}" if shape.kv_heads != shape.n_head else "")
        raise LayoutError(f"tp={layout.tp} must divide {what} so each tp rank holds whole heads; "
                          f"choose tp in {divisors(heads)}")
    if shape.n_layer % layout.pp:
        raise LayoutError(f"pp={layout.pp} must divide n_layer={shape.n_layer} so every stage gets the same "
                          f"number of layers; choose pp in {divisors(shape.n_layer)}")
    if layout.schedule == "interleaved":
        chunks = layout.pp * layout.v
        if shape.n_layer % chunks:
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
