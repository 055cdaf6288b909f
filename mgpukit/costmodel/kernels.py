"""How long one GEMM or one memory-bound kernel takes: a roofline with shape effects.

**GEMMs.** An ``(m × k) · (k × n)`` product does ``2·m·n·k`` FLOPs and moves at least its
operands and result, ``e·(m·k + k·n + m·n)`` bytes. On the roofline (Williams, Waterman &
Patterson 2009) it takes ``max(FLOPs / R, bytes / BW)``: arithmetic intensity FLOPs/bytes
below the ridge ``R / BW`` (A100: 312 TFLOP/s / 2.04 TB/s ≈ 153 FLOP/B) makes it
memory-bound — the attention scores ``Q·Kᵀ`` with a head dimension of 64–160 are.

``R`` is not the datasheet peak. cuBLAS splits the output into tiles (256×128, 128×128, ...),
one tile per streaming multiprocessor (SM) at a time, and runs them in *waves* of ``#SMs``
tiles (NVIDIA, "Matrix Multiplication Background User's Guide", DU-09799-001, §2.3 "Typical
tile dimensions in cuBLAS", §3.1 "Tile quantization", §3.2 "Wave quantization"). A partial
tile costs a full tile and a partial wave a full wave, so the useful fraction is

    η(m, n) = m·n / (waves · #SMs · tile_m · tile_n),   waves = ⌈⌈m/tile_m⌉·⌈n/tile_n⌉ / #SMs⌉

(batched GEMMs multiply the tile count by the batch). The library picks the tile that wastes
least; we take the best of the profile's tiles. ``R = peak · efficiency · η``, where
``efficiency`` is what a large, well-shaped GEMM sustains (the profile's ``[gemm]`` table;
its source is written beside it). The table describes tensor-core GEMMs (bf16, fp16, tf32, and
fp8 on GPUs that have it: the same tiles and efficiency at the fp8 peak, an assumption);
fp32 GEMMs run on the CUDA cores with other tiles, and they, like every matmul on a profile
without a ``[gemm]`` table (the CPU profiles), fall back to a flat ``peak · compute_efficiency``.

**Memory-bound kernels** (norms, activations, softmax, dropout, residual adds, optimizer
updates) do too few FLOPs per byte to matter: they take ``bytes / BW``, bytes = what they read
plus what they write (the elementwise cost model of Ivanov et al. 2021, "Data Movement Is All
You Need").
"""

from __future__ import annotations

import math

from mgpukit.costmodel.hardware import HardwareProfile


TENSOR_CORE_DTYPES = ("bf16", "fp16", "tf32", "fp8")
OPERAND_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}


def _table(profile: HardwareProfile, dtype: str):
    """The ``[gemm]`` table when it applies to ``dtype`` (tensor-core GEMMs), else None."""
    return profile.gemm if dtype in TENSOR_CORE_DTYPES else None


def wave_efficiency(m: int, n: int, profile: HardwareProfile, *, batch: int = 1, dtype: str = "bf16") -> float:
    """Useful fraction of the tiles × waves a GEMM with an ``m × n`` output (``batch`` of them)
    keeps busy, best tile of the profile's (module docstring); 1.0 without a ``[gemm]`` table."""
    g = _table(profile, dtype)
    if g is None:
        return 1.0
    best = 0.0
    for tm, tn in g.tiles:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        waves = math.ceil(tiles / g.sms)
        best = max(best, batch * m * n / (waves * g.sms * tm * tn))
    return best


def depth_efficiency(k: int, profile: HardwareProfile, *, dtype: str = "bf16") -> float:
    """``k / (k + k_half)``: each output tile loops over the reduction in steps and pays a fixed
    prologue (filling its pipeline of shared-memory stages) and epilogue (writing the tile), so a
    short reduction amortises them poorly; 1.0 without a ``[gemm]`` table."""
    g = _table(profile, dtype)
    return 1.0 if g is None else k / (k + g.k_half)


def matmul_rate(profile: HardwareProfile, dtype: str) -> float:
    """FLOP/s of a large, well-shaped GEMM: ``peak · [gemm] efficiency`` (or ``compute_efficiency``)."""
    g = _table(profile, dtype)
    eff = g.efficiency if g is not None else profile.compute_efficiency
    return profile.flops(dtype) * eff


def gemm_seconds(m: int, n: int, k: int, profile: HardwareProfile, *, dtype: str = "bf16",
                 batch: int = 1, extra_bytes: float = 0.0) -> float:
    """Seconds of ``batch`` GEMMs ``(m × k)·(k × n)``: ``max(FLOPs / R, bytes / BW)`` with
    ``R = peak · efficiency · η(m, n)`` (module docstring). ``extra_bytes`` adds traffic the
    kernel also moves (an accumulator it reads, a fused epilogue)."""
    e = OPERAND_BYTES[dtype]
    flops = 2.0 * m * n * k * batch
    nbytes = e * batch * (m * k + k * n + m * n) + extra_bytes
    rate = (matmul_rate(profile, dtype) * wave_efficiency(m, n, profile, batch=batch, dtype=dtype)
            * depth_efficiency(k, profile, dtype=dtype))
    return max(flops / rate, nbytes / profile.memory_bandwidth)


def memory_seconds(nbytes: float, profile: HardwareProfile) -> float:
    """Seconds of memory-bound kernels moving ``nbytes`` (read + write) through HBM."""
    return nbytes / profile.memory_bandwidth
