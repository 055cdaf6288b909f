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
fp8 on GPUs that have it: the same tiles at the fp8 peak, with the ``[gemm.fp8]`` efficiency
where the profile cites one — fp8 doubles the work per clock, and at the same power cap it
sustains a smaller fraction of its peak — else the 16-bit efficiency, an assumption);
fp32 GEMMs run on the CUDA cores with other tiles, and they, like every matmul on a profile
without a ``[gemm]`` table (the CPU profiles), fall back to a flat ``peak · compute_efficiency``.

**Sustained power.** The efficiency above is what a GEMM reaches in a short burst (a few
launches after a warm-up, as `mgpukit calibrate` times it). A GPU that runs GEMMs back to back
for seconds, as every GPU of a large training step does, runs at its board power limit, and
there the clock — hence the FLOP rate — drops until the power fits: a ceiling on FLOP/s,
``peak · sustained`` (the ``[gemm] sustained`` figure, measured), which a well-shaped GEMM meets
and a poorly shaped one (idle SMs draw less) may stay under. The planner charges it
(`at_sustained_power`); the emulator, whose steps are short bursts, does not.

**Memory-bound kernels** (norms, activations, softmax, dropout, residual adds, optimizer
updates) do too few FLOPs per byte to matter: they take ``bytes / BW``, bytes = what they read
plus what they write (the elementwise cost model of Ivanov et al. 2021, "Data Movement Is All
You Need").
"""

from __future__ import annotations

import math
from dataclasses import replace

from mgpukit.costmodel.profile import HardwareProfile


TENSOR_CORE_DTYPES = ("bf16", "fp16", "tf32", "fp8")
OPERAND_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}


def _table(profile: HardwareProfile, dtype: str):
    """The ``[gemm]`` table for ``dtype``: the tensor-core one (bf16, fp16, tf32), its
    ``[gemm.fp8]`` sub-table for fp8 where the profile has one (else the tensor-core table at
    the fp8 peak), its ``[gemm.fp32]`` sub-table for fp32 (CUDA cores), else None (flat rate)."""
    if profile.gemm is None:
        return None
    if dtype == "fp8" and profile.gemm.fp8 is not None:
        return profile.gemm.fp8
    return profile.gemm if dtype in TENSOR_CORE_DTYPES else profile.gemm.fp32


def has_gemm_table(profile: HardwareProfile, dtype: str) -> bool:
    """Whether GEMMs of ``dtype`` are timed by shape on ``profile`` (else the flat roofline)."""
    return _table(profile, dtype) is not None


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
    """Seconds of ``batch`` GEMMs ``(m × k)·(k × n)``: ``latency + max(FLOPs / R, bytes / BW)``
    with ``R = peak · efficiency · η(m, n) · k/(k + k_half)`` (module docstring). ``extra_bytes``
    adds traffic the kernel also moves (an accumulator it reads, a fused epilogue)."""
    e = OPERAND_BYTES[dtype]
    flops = 2.0 * m * n * k * batch
    nbytes = e * batch * (m * k + k * n + m * n) + extra_bytes
    rate = (matmul_rate(profile, dtype) * wave_efficiency(m, n, profile, batch=batch, dtype=dtype)
            * depth_efficiency(k, profile, dtype=dtype))
    g = _table(profile, dtype)
    if g is not None and g.cap:
        rate = min(rate, profile.flops(dtype) * g.cap)
    return (g.latency if g is not None else 0.0) + max(flops / rate, nbytes / profile.memory_bandwidth)


def at_sustained_power(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with its measured sustained-power ceiling in force on the tensor-core GEMMs
    (module docstring); the profile itself where it has none. fp8 GEMMs, where no fp8 stream was
    measured, lose the same fraction of their burst rate as the measured 16-bit stream (an
    assumption: twice the work per clock under the same power limit)."""
    g = profile.gemm
    if g is None or not g.sustained:
        return profile
    fp8 = g.fp8
    if fp8 is not None:  # no fp8 GEMM was streamed: its own figure, else the 16-bit stream's loss (an assumption)
        fp8 = replace(fp8, cap=fp8.sustained or fp8.efficiency * g.sustained / g.efficiency)
    return replace(profile, gemm=replace(g, cap=g.sustained, fp8=fp8))


ATTENTION_BLOCK = 128  # query rows per thread block of a flash-style kernel (FlashAttention-2 §3.2)


def attention_flops(batch_heads: int, q_len: int, kv_len: int, head_dim: int, *, causal: bool,
                    backward: bool = False) -> float:
    """FLOPs a fused attention kernel *does*: ``4·BH·q·kv·hd`` forward (``Q·Kᵀ`` and ``A·V``),
    ``2.5×`` that backward (it recomputes the scores: 5 matmuls), times the share of the
    ``q × kv`` score tiles under a causal mask — query ``i`` sees keys up to ``i + kv − q`` — which
    a flash-style kernel skips (``1 − q/(2·kv)``, about a half). torch's FLOP counter does not
    halve for causality; the kernel does."""
    flops = 4.0 * batch_heads * q_len * kv_len * head_dim * (2.5 if backward else 1.0)
    return flops * (1.0 - q_len / (2.0 * kv_len)) if causal else flops


def attention_seconds(batch_heads: int, q_len: int, kv_len: int, head_dim: int, profile: HardwareProfile,
                      *, dtype: str = "bf16", causal: bool = True, backward: bool = False,
                      nbytes: float = 0.0) -> float:
    """Seconds of one fused attention kernel (SDPA's flash, cuDNN or memory-efficient kernel)
    over ``batch_heads`` problems of ``q_len`` queries against ``kv_len`` keys.

    With an ``[attention]`` table: the FLOPs it does (`attention_flops`: causal tiles skipped)
    at ``peak · efficiency`` of the direction and dtype, times the wave efficiency of its
    ``batch_heads · ⌈q/128⌉`` thread blocks over the SMs, plus the GEMM latency; where the table
    has shape terms (``AttentionModel.by_shape``) the 16-bit kernels count tiles instead
    (`_tiled_attention_seconds`). Without one:
    the old estimate, all ``q × kv`` scores at the GEMM rate of a ``q × head_dim`` output.
    ``nbytes``: what it reads and writes (q, k, v, output, log-sum-exp), a floor by bandwidth."""
    floor = nbytes / profile.memory_bandwidth
    a, g = profile.attention, _table(profile, dtype)
    if a is None or g is None:
        flops = attention_flops(batch_heads, q_len, kv_len, head_dim, causal=False, backward=backward)
        rate = (matmul_rate(profile, dtype) * wave_efficiency(q_len, head_dim, profile, batch=batch_heads, dtype=dtype)
                * depth_efficiency(head_dim, profile, dtype=dtype))
        return max(flops / rate, floor)
    flops = attention_flops(batch_heads, q_len, kv_len, head_dim, causal=causal and a.causal_skip,
                            backward=backward)
    if dtype in TENSOR_CORE_DTYPES and a.by_shape:
        return max(_tiled_attention_seconds(batch_heads, q_len, kv_len, head_dim, profile, a, g, dtype=dtype,
                                            causal=causal and a.causal_skip, backward=backward), floor)
    if dtype in TENSOR_CORE_DTYPES:
        eff = a.backward if backward else a.forward
    else:
        eff = a.fp32_backward if backward else a.fp32_forward
    blocks = batch_heads * math.ceil(q_len / ATTENTION_BLOCK)
    waves = math.ceil(blocks / g.sms)
    occupancy = batch_heads * q_len / (waves * g.sms * ATTENTION_BLOCK)
    return g.latency + max(flops / (profile.flops(dtype) * eff * occupancy), floor)


def _tiled_attention_seconds(batch_heads: int, q_len: int, kv_len: int, head_dim: int,
                             profile: HardwareProfile, a, g, *, dtype: str, causal: bool, backward: bool) -> float:
    """A flash-style kernel by its tiles (``AttentionModel`` docstring): each thread block owns
    128 queries (forward; backward: 128 keys, the same count) and loops over the 128-wide key
    tiles it needs — under a causal mask, those up to its diagonal, the diagonal tile whole.
    Per SM: the blocks' tiles plus ``block_overhead`` tiles per block, spread over the SMs, plus
    ``tail`` of the longest block's loop (backward: the ``*_backward`` figures); each tile ``4 · 128² · hd`` FLOPs (2.5× backward) at
    ``peak · efficiency · hd / (hd + head_dim_half)`` of one SM."""
    nq, nk = math.ceil(q_len / ATTENTION_BLOCK), math.ceil(kv_len / ATTENTION_BLOCK)
    if causal:  # query block i sees key tiles up to i + (nk − nq): a triangle on top of a rectangle
        longest = nk
        tiles = nq * (nq + 1) / 2 + nq * max(0, nk - nq) if nk >= nq else nk * (nk + 1) / 2
    else:
        longest, tiles = nk, nq * nk
    over, tail = (a.block_overhead_backward, a.tail_backward) if backward else (a.block_overhead, a.tail)
    per_sm = batch_heads * (tiles + over * nq) / g.sms + tail * (longest + over)
    tile_flops = 4.0 * ATTENTION_BLOCK ** 2 * head_dim * (2.5 if backward else 1.0)
    eff = (a.backward if backward else a.forward) * head_dim / (head_dim + a.head_dim_half)
    return g.latency + per_sm * tile_flops / (profile.flops(dtype) * eff / g.sms)


def memory_seconds(nbytes: float, profile: HardwareProfile) -> float:
    """Seconds of memory-bound kernels moving ``nbytes`` (read + write) through HBM."""
    return nbytes / profile.memory_bandwidth
