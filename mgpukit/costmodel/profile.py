"""What a hardware profile says: the few public figures a cost model needs about a cluster.

A `HardwareProfile` is one accelerator and its links; every figure in the shipped files
(`data/hardware/*.toml`, read and written by `mgpukit.costmodel.hardware`) carries a comment
naming its public source: NVIDIA datasheets for peak FLOP/s, memory and link rates;
nccl-tests reports for the alpha (latency per ring step) and the bus bandwidth collectives
really reach. This module holds the figures and their checks, and the nested dict a TOML
file holds (`to_dict` / `from_dict`); finding and reading the files is `hardware`'s.

Links follow the alpha-beta (Hockney) model: sending ``n`` bytes over one hop costs
``alpha + n / beta``. ``beta`` is the *unidirectional, per-GPU* bandwidth a collective can
use ("bus bandwidth" in nccl-tests terms), not the marketing bidirectional figure.

A GPU profile also says what it costs the *host* to issue work (``[launch]`` and the
``op_overhead_*`` keys of ``[efficiency]``): eager PyTorch spends microseconds of CPU time per
op before its kernel is queued, so a model of small kernels is launch-bound on a fast GPU
(`mgpukit.measure.vclock` models the host and the device stream apart; `kernels_only` drops
these costs, for comparisons with closed forms that count kernels only).

    >>> from mgpukit.costmodel.hardware import load_profile
    >>> p = load_profile("h100-nvlink")
    >>> p.flops("bf16"), p.intra_node.beta
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mgpukit.costmodel.profile_types import check_profile_types

DTYPES = ("fp32", "tf32", "bf16", "fp16")  # every profile has these
FP8 = "fp8"  # only GPUs with fp8 tensor cores (Hopper and later) list it
OP_CONTEXTS = ("forward", "backward", "no_grad")  # where an op runs, for its dispatch overhead


@dataclass(frozen=True, kw_only=True)
class Link:
    """One kind of hop: ``alpha`` seconds of latency, ``beta`` bytes/s of bandwidth."""

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and math.isfinite(self.beta)) or self.alpha < 0 or self.beta <= 0:
            raise ValueError(f"a link needs finite alpha >= 0 and beta > 0, got alpha={self.alpha}, beta={self.beta}")


@dataclass(frozen=True, kw_only=True)
class PeakFlops:
    """Dense peak FLOP/s per dtype (no 2:4 sparsity); ``fp8`` is None on GPUs without fp8
    tensor cores (A100: the datasheet lists none)."""

    fp32: float
    tf32: float
    bf16: float
    fp16: float
    fp8: float | None = None


@dataclass(frozen=True, kw_only=True)
class GemmModel:
    """How fast a GEMM runs, by its shape (`mgpukit.costmodel.kernels`): the ``[gemm]`` table.

    ``efficiency``: fraction of peak a large, well-shaped GEMM sustains; ``sms``: streaming
    multiprocessors (one output tile per SM per wave); ``tiles``: the output-tile shapes the
    library picks from (NVIDIA, "Matrix Multiplication Background User's Guide", §2.3, §3).
    """

    efficiency: float
    sms: int
    tiles: tuple[tuple[int, int], ...] = ((256, 128), (128, 128))
    k_half: float = 0.0  # reduction length at which a tile reaches half its rate (prologue/epilogue)
    latency: float = 0.0  # seconds every GEMM kernel costs besides its tiles (ramp-up, tail)
    # fp32 GEMMs (CUDA cores, no TF32) by the same model with their own figures ([gemm.fp32]);
    # None: fp32 matmuls take the flat ``peak · compute_efficiency``
    fp32: "GemmModel | None" = None
    # fp8 GEMMs ([gemm.fp8]: the same tiles at the fp8 peak, with the fraction of it they sustain);
    # None: fp8 GEMMs take this table's figures at the fp8 peak
    fp8: "GemmModel | None" = None
    # [gemm] sustained: the fraction of peak a stream of GEMMs sustains for seconds at the board's
    # power limit (a ceiling on FLOP/s, `kernels.gemm_seconds`); 0: not measured. ``cap`` is the
    # ceiling in force: 0 in a profile as read (the emulator's short bursts), ``sustained`` in the
    # planner's multi-second steps (`kernels.at_sustained_power`); never written to a file
    sustained: float = 0.0
    cap: float = 0.0

    def __post_init__(self) -> None:
        if not (0 <= self.sustained <= 1 and 0 <= self.cap <= 1):
            raise ValueError(f"[gemm] sustained must be in [0, 1], got {self.sustained}")
        if not 0 < self.efficiency <= 1 or self.sms < 1 or not self.tiles:
            raise ValueError(f"[gemm] needs 0 < efficiency <= 1, sms >= 1 and some tiles; got {self}")
        if not (math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"[gemm] latency must be a finite number >= 0, got {self.latency}")


SHAPE_TERMS = ("head_dim_half", "block_overhead", "block_overhead_backward", "tail", "tail_backward")


@dataclass(frozen=True, kw_only=True)
class AttentionModel:
    """How fast a fused attention kernel runs (`mgpukit.costmodel.kernels.attention_seconds`):
    the ``[attention]`` table. Efficiencies are fractions of the dtype's peak on the FLOPs the
    kernel really does: with a causal mask a flash-style kernel skips the tiles above the
    diagonal, about half of them (Dao 2023, FlashAttention-2 §3.1), so ``causal_skip``."""

    forward: float  # 16-bit kernels (flash / cuDNN)
    backward: float
    fp32_forward: float  # fp32 kernels (memory-efficient attention on CUDA cores)
    fp32_backward: float
    causal_skip: bool = True
    # By shape (`kernels.attention_seconds`; all 0: the flat rates above on every shape). With
    # them, ``forward``/``backward`` are the rate of one SM's inner loop over 128 × 128 score tiles
    # at an infinite head dim, and a kernel's time counts tiles: the causal triangle's, plus
    # ``block_overhead`` tiles' worth per thread block (load q, write out and normalise: amortised
    # over the block's loop over the keys, so long sequences run faster), plus ``tail`` of the
    # longest block's loop (the last blocks leave SMs idle: few heads run slower), each tile at
    # ``hd / (hd + head_dim_half)`` of the rate (the softmax's exponentials per score do not grow
    # with the head dim, the two matmuls per score do); ``*_backward``: the backward kernel's
    head_dim_half: float = 0.0
    block_overhead: float = 0.0
    block_overhead_backward: float = 0.0
    tail: float = 0.0
    tail_backward: float = 0.0

    @property
    def by_shape(self) -> bool:
        return any(getattr(self, k) for k in SHAPE_TERMS)

    def __post_init__(self) -> None:
        for key in SHAPE_TERMS:
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"[attention] {key} must be a finite number >= 0, got {value}")
        for key in ("forward", "backward", "fp32_forward", "fp32_backward"):
            value = getattr(self, key)
            if not (math.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"[attention] {key} must be in (0, 1], got {value}")


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """One accelerator and its links. Sizes are bytes, rates bytes/s or FLOP/s, times s.

    ``compute_efficiency`` is the fraction of peak that matmul-heavy training kernels reach
    (the cost model divides FLOPs by ``peak * compute_efficiency``); ``usable_memory`` the
    fraction of device memory left for tensors after the runtime's own reservations.
    """

    name: str
    description: str = ""
    peak_flops: PeakFlops
    memory_bytes: float
    memory_bandwidth: float
    gpus_per_node: int
    intra_node: Link
    inter_node: Link
    compute_efficiency: float = 0.5
    usable_memory: float = 0.9
    op_overhead: float = 0.0  # seconds of host dispatch per op (eager PyTorch; CPU workers: calibrated)
    # Per-op overhead by where the op runs (see `dispatch_overhead`); None: `op_overhead` for all.
    op_overhead_by_context: dict[str, float] | None = None
    # How many times the forward/backward figures above an op of a *model* costs the host
    # (`dispatch_overhead(..., model_code=True)`): the figures are measured on a chain of one op,
    # a model's ops come with module calls, views and autograd nodes that launch nothing
    model_code_factor: float = 1.0
    # GEMM time by shape (tile/wave quantisation); None: flat ``compute_efficiency`` for every matmul
    gemm: GemmModel | None = None
    # fused attention kernels' rate ([attention]); None: their FLOPs at the GEMM rate
    attention: AttentionModel | None = None
    # [launch]: True on GPUs — the host *issues* kernels onto a device stream and runs on while
    # they execute (False: CPU workers, where the same core dispatches and computes, so the
    # dispatch overhead adds to every op).
    async_launch: bool = False
    min_kernel_time: float = 0.0  # seconds: the shortest a kernel occupies the device stream
    collective_launch: float = 0.0  # host seconds to issue one collective or message (NCCL)
    host_scalar_op: float = 0.0  # host seconds of an op on a CPU scalar (optimizer step counters): no launch
    # [memory] blas_workspace: bytes cuBLAS holds per (handle, stream) from the caching allocator
    # (`measure.allocator`: the forward thread and the autograd thread each have one)
    blas_workspace: float = 0.0
    # [scale] gpu_spread: the spread of sustained matmul rates across a fleet of this GPU (a fraction,
    # `costmodel.fleet`); only where the GEMM rate is one GPU's measurement, 0 where it was read off
    # whole multi-GPU runs (the slowest GPU's pace is then inside the rate)
    gpu_spread: float = 0.0

    def __post_init__(self) -> None:
        # a negative bandwidth or a NaN memory size gives negative or NaN times, silently
        positive = {"memory_bytes": self.memory_bytes, "memory_bandwidth": self.memory_bandwidth,
                    **{f"peak_flops.{d}": getattr(self.peak_flops, d) for d in DTYPES}}
        if self.peak_flops.fp8 is not None:
            positive["peak_flops.fp8"] = self.peak_flops.fp8
        for key, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"profile {self.name!r}: {key} must be a finite number > 0, got {value}")
        overheads = {"op_overhead": self.op_overhead, **{f"op_overhead_{c}": v for c, v in
                                                         (self.op_overhead_by_context or {}).items()},
                     "efficiency.model_code_factor": self.model_code_factor,
                     "launch.min_kernel": self.min_kernel_time, "launch.collective": self.collective_launch,
                     "launch.host_op": self.host_scalar_op, "scale.gpu_spread": self.gpu_spread}
        for key, value in overheads.items():
            if not (math.isfinite(value) and value >= 0):
                table = "" if key.startswith(("launch.", "efficiency.", "scale.")) else "efficiency."
                raise ValueError(f"profile {self.name!r}: {table}{key} must be a finite number >= 0, got {value}")
        if self.gpus_per_node < 1:
            raise ValueError(f"profile {self.name!r}: gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if not 0 < self.compute_efficiency <= 1 or not 0 < self.usable_memory <= 1:
            raise ValueError(f"profile {self.name!r}: efficiencies must be in (0, 1]")

    def dispatch_overhead(self, context: str, *, model_code: bool = False) -> float:
        """Host seconds per op run in `context` (one of `OP_CONTEXTS`): "forward" (autograd
        records the op, Python module code around it), "backward" (the C++ autograd engine),
        "no_grad" (optimizer updates, packing, anything that records nothing).

        ``model_code``: the op is one a model's code issues (or its backward node), not one torch
        issues from C++ on its own (autocast's casts, their backward): forward and backward
        figures are then scaled by ``model_code_factor``."""
        base = (self.op_overhead_by_context or {}).get(context, self.op_overhead)
        return base * self.model_code_factor if model_code and context != "no_grad" else base

    def kernels_only(self) -> "HardwareProfile":
        """This profile without host costs (no dispatch, no launch, no minimum kernel time):
        the kernels and messages alone, to set beside a closed form (`costmodel.gpt_step`,
        which has no host) where a model's step is mostly launches."""
        return replace(self, name=f"{self.name}-kernels-only", op_overhead=0.0,
                       op_overhead_by_context=None, async_launch=False, min_kernel_time=0.0,
                       collective_launch=0.0, host_scalar_op=0.0)

    def flops(self, dtype: str = "bf16") -> float:
        """Peak dense FLOP/s for ``dtype`` ("fp32", "tf32", "bf16", "fp16", "fp8"); a profile
        without fp8 tensor cores refuses "fp8" in one line."""
        if dtype == FP8:
            if self.peak_flops.fp8 is None:
                raise ValueError(f"profile {self.name!r} has no fp8 tensor cores (its datasheet lists no fp8 rate); "
                                 f"use bf16 or fp16, or an H100/H200 profile")
            return self.peak_flops.fp8
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES + (FP8,))}")
        return getattr(self.peak_flops, dtype)

    @property
    def usable_memory_bytes(self) -> float:
        """Memory the cost model lets tensors use: ``memory_bytes * usable_memory``."""
        return self.memory_bytes * self.usable_memory

    # -------------------------------------------------------------- dict / TOML round trip

    def to_dict(self) -> dict:
        """The profile as the nested dict its TOML file holds."""
        return {
            "name": self.name,
            "description": self.description,
            "gpus_per_node": self.gpus_per_node,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth": self.memory_bandwidth,
            "peak_flops": {d: getattr(self.peak_flops, d) for d in DTYPES
                           + ((FP8,) if self.peak_flops.fp8 is not None else ())},
            "intra_node": {"alpha": self.intra_node.alpha, "beta": self.intra_node.beta},
            "inter_node": {"alpha": self.inter_node.alpha, "beta": self.inter_node.beta},
            **({"gemm": _gemm_dict(self.gemm)} if self.gemm else {}),
            **({"attention": {k: v for k, v in vars(self.attention).items()
                              if k not in SHAPE_TERMS or v}}
               if self.attention else {}),
            "efficiency": {"compute": self.compute_efficiency, "usable_memory": self.usable_memory,
                           "op_overhead": self.op_overhead,
                           **({"model_code_factor": self.model_code_factor} if self.model_code_factor != 1.0 else {}),
                           **{f"op_overhead_{c}": v for c, v in (self.op_overhead_by_context or {}).items()}},
            **({"memory": {"blas_workspace": self.blas_workspace}} if self.blas_workspace else {}),
            **({"scale": {"gpu_spread": self.gpu_spread}} if self.gpu_spread else {}),
            **({"launch": {"async": self.async_launch, "min_kernel": self.min_kernel_time,
                           "collective": self.collective_launch, "host_op": self.host_scalar_op}}
               if self.async_launch or self.min_kernel_time or self.collective_launch else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "HardwareProfile":
        """Build a profile from the nested dict of a TOML file; says which key is missing, and
        which has a value of the wrong type (`profile_types`: no silent coercion)."""
        check_profile_types(d)
        try:
            eff = d.get("efficiency", {})
            launch = d.get("launch", {})
            return cls(
                name=d["name"],
                description=d.get("description", ""),
                gpus_per_node=int(d["gpus_per_node"]),
                memory_bytes=float(d["memory_bytes"]),
                memory_bandwidth=float(d["memory_bandwidth"]),
                peak_flops=PeakFlops(**{k: float(d["peak_flops"][k]) for k in DTYPES
                                        + ((FP8,) if FP8 in d["peak_flops"] else ())}),
                intra_node=Link(alpha=float(d["intra_node"]["alpha"]), beta=float(d["intra_node"]["beta"])),
                inter_node=Link(alpha=float(d["inter_node"]["alpha"]), beta=float(d["inter_node"]["beta"])),
                compute_efficiency=float(eff.get("compute", 0.5)),
                usable_memory=float(eff.get("usable_memory", 0.9)),
                op_overhead=float(eff.get("op_overhead", 0.0)),
                model_code_factor=float(eff.get("model_code_factor", 1.0)),
                op_overhead_by_context={c: float(eff[f"op_overhead_{c}"]) for c in OP_CONTEXTS
                                        if f"op_overhead_{c}" in eff} or None,
                gemm=_gemm(d["gemm"]) if "gemm" in d else None,
                attention=AttentionModel(**d["attention"]) if "attention" in d else None,
                async_launch=bool(launch.get("async", False)),
                min_kernel_time=float(launch.get("min_kernel", 0.0)),
                collective_launch=float(launch.get("collective", 0.0)),
                host_scalar_op=float(launch.get("host_op", 0.0)),
                blas_workspace=float(d.get("memory", {}).get("blas_workspace", 0.0)),
                gpu_spread=float(d.get("scale", {}).get("gpu_spread", 0.0)),
            )
        except KeyError as e:
            raise ValueError(f"hardware profile {d.get('name', '?')!r} lacks the key {e.args[0]!r}") from None


def _gemm(d: dict, parent: GemmModel | None = None) -> GemmModel:
    """``[gemm]`` (or its ``[gemm.fp32]`` / ``[gemm.fp8]`` sub-table, which inherits the SMs, tiles
    and latency it does not set)."""
    base = parent or GemmModel(efficiency=1.0, sms=1)
    tiles = tuple((int(m), int(n)) for m, n in d.get("tiles", base.tiles))
    g = GemmModel(efficiency=float(d["efficiency"]), sms=int(d.get("sms", base.sms)), tiles=tiles,
                  k_half=float(d.get("k_half", 0.0)), latency=float(d.get("latency", base.latency)),
                  sustained=float(d.get("sustained", 0.0)))
    subs = {key: _gemm(d[key], g) for key in ("fp32", "fp8") if isinstance(d.get(key), dict)}
    return replace(g, **subs) if subs else g


def _gemm_dict(g: GemmModel) -> dict:
    out = {"efficiency": g.efficiency, "sms": g.sms, "k_half": g.k_half, "latency": g.latency,
           "tiles": [list(t) for t in g.tiles], **({"sustained": g.sustained} if g.sustained else {})}
    for key in ("fp32", "fp8"):
        if getattr(g, key) is not None:
            out[key] = _gemm_dict(getattr(g, key))
    return out
