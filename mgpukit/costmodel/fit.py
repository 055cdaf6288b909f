"""Fit a GPU profile's free parameters to kernel and host micro-measurements.

A profile's datasheet figures (peak FLOP/s, HBM bandwidth) say what the chip *could* do; what
eager PyTorch reaches on it is a handful of physical parameters, each measured by one small
experiment and each used by the emulator (`mgpukit.measure.vclock`) and the closed forms
(`costmodel.gpt_step`, `costmodel.steptime`) alike:

============================  ==========================================  ============================
parameter                     physics                                     measured by
============================  ==========================================  ============================
``[gemm] efficiency``         fraction of peak a well-shaped GEMM         ``torch.matmul`` of GPT
``k_half``                    sustains; a tile's prologue/epilogue        shapes, bf16 and fp32,
``latency``                   (rate ∝ k/(k + k_half)); what every GEMM    CUDA events (`gemm` rows)
(``[gemm.fp32]`` for fp32)    kernel costs besides its tiles
``memory_bandwidth``          what a memory-bound kernel streams          a 1 GiB device copy
``op_overhead_forward`` …     host time per eager op: forward with        2,000 chained ops on a tiny
                              autograd, its backward, no_grad             tensor (`host_per_op_us`)
============================  ==========================================  ============================

The tile shapes and SM count are not fitted (NVIDIA's "Matrix Multiplication Background
User's Guide" §2.3 lists cuBLAS's tiles; the SM count is the chip's). The fit is least squares
on relative errors; rows the measurement itself says are launch-bound (shorter than the host
takes to issue one matmul) bound the model from above and are not fitted.

Nothing here is tuned to a training step: the steps of `data/reference/` are the *check*
(`mgpukit.bench.reference`), not the fit — except the one step-fitted figure,
``model_code_factor``, which `mgpukit.bench.reference` bisects on the gpt-tiny row alone. The attention kernel has no micro-measurement in
the 2026-11-26 reference; `mgpukit calibrate` on a GPU measures it (`calibrate_gpu.py`).

Input: the dict `mgpukit calibrate` writes on a GPU, or `data/reference/h200-2026-11-26.json`
(keys ``gemm``, ``copy_bytes_per_s``, ``host_per_op_us``).
"""
from __future__ import annotations

import math
import statistics

from mgpukit.costmodel.kernels import ATTENTION_BLOCK, attention_flops

TILES = ((256, 128), (128, 128), (128, 64))  # cuBLAS output tiles (NVIDIA GEMM guide §2.3)
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
LATENCY_GRID = tuple(i * 0.5e-6 for i in range(0, 31))  # 0 … 15 µs
K_HALF_GRID = tuple(range(0, 1025, 8))


def _waves(m: int, n: int, sms: int, tiles=TILES, batch: int = 1) -> float:
    """Useful fraction of tiles × waves, best tile (as `kernels.wave_efficiency`)."""
    best = 0.0
    for tm, tn in tiles:
        count = math.ceil(m / tm) * math.ceil(n / tn) * batch
        best = max(best, batch * m * n / (math.ceil(count / sms) * sms * tm * tn))
    return best


def _compute_part(row: dict, peak: float, sms: int, k_half: float) -> float:
    """Seconds of a GEMM row at efficiency 1 and no latency (the part ``1/efficiency`` scales)."""
    m, n, k = row["m"], row["n"], row["k"]
    return 2.0 * m * n * k / (peak * _waves(m, n, sms) * k / (k + k_half))


def launch_bound_floor(rows: list[dict]) -> float:
    """The host's time to issue one matmul, read off the table: back-to-back launches of the
    smallest bf16 GEMM (its kernel is far shorter) are timed at the host's pace. Rows no slower
    than this (×1.05) are launch-bound: their kernel time is only bounded by it."""
    small = [r["s"] for r in rows if r["m"] * r["n"] * r["k"] <= 512**3 and r["dtype"] != "float32"]
    return min(small) if small else 0.0


def fit_gemm(rows: list[dict], *, peak: dict[str, float], sms: int) -> dict:
    """Fit ``efficiency`` and ``k_half`` per dtype and one shared ``latency`` to GEMM rows
    (``m, n, k, dtype, s``). Returns ``{"latency": s, "bf16": {...}, "fp32": {...}, "floor": s}``,
    each dtype with ``efficiency``, ``k_half``, ``rms`` and ``max`` relative error and the
    per-row ``residuals`` (model / measured − 1, launch-bound rows marked)."""
    floor = launch_bound_floor(rows)
    by_dtype: dict[str, list[dict]] = {}
    for r in rows:
        by_dtype.setdefault(DTYPES[r["dtype"]], []).append(r)
    best = None
    for latency in LATENCY_GRID:
        fits, total = {}, 0.0
        for dt, rs in by_dtype.items():
            fitted = [r for r in rs if r["s"] > 1.05 * floor]
            fitted = fitted if len(fitted) >= 2 else rs  # a quick run's shapes may all be small
            fits[dt] = min((_fit_efficiency(fitted, peak[dt], sms, kh, latency) for kh in K_HALF_GRID),
                           key=lambda f: f["rms"])
            total += fits[dt]["rms"] ** 2 * len(fitted)
        if best is None or total < best[0]:
            best = (total, latency, fits)
    _, latency, fits = best
    for dt, rs in by_dtype.items():
        f = fits[dt]
        f["residuals"] = [{"m": r["m"], "n": r["n"], "k": r["k"], "measured_s": r["s"],
                           "model_s": latency + _compute_part(r, peak[dt], sms, f["k_half"]) / f["efficiency"],
                           "launch_bound": r["s"] <= 1.05 * floor} for r in rs]
        for res in f["residuals"]:
            res["error"] = res["model_s"] / res["measured_s"] - 1
    return {"latency": latency, "floor": floor, **fits}


def _fit_efficiency(rows, peak: float, sms: int, k_half: float, latency: float) -> dict:
    """Least-squares ``1/efficiency`` for fixed ``k_half`` and ``latency``: the relative error
    ``(latency + c_i·x)/s_i − 1`` is linear in ``x``."""
    a = [latency / r["s"] - 1 for r in rows]
    b = [_compute_part(r, peak, sms, k_half) / r["s"] for r in rows]
    x = -sum(ai * bi for ai, bi in zip(a, b)) / sum(bi * bi for bi in b)
    x = max(x, 1.0)  # efficiency <= 1
    errors = [ai + x * bi for ai, bi in zip(a, b)]
    return {"efficiency": 1.0 / x, "k_half": float(k_half),
            "rms": math.sqrt(sum(e * e for e in errors) / len(errors)), "max": max(abs(e) for e in errors)}


def fit_host(per_op: list[dict]) -> dict[str, float]:
    """Host seconds per eager op by context: the median of the repeats of each
    (``fwd_grad_us``, ``bwd_us``, ``no_grad_us``; the first repeat pays warm-up, the median
    ignores it)."""
    keys = {"forward": "fwd_grad_us", "backward": "bwd_us", "no_grad": "no_grad_us"}
    return {ctx: 1e-6 * statistics.median(r[key] for r in per_op) for ctx, key in keys.items()}


def fit_bandwidth(copy_bytes_per_s: list[float]) -> float:
    """Bytes/s a memory-bound kernel streams: the median device copy (read + write)."""
    return statistics.median(copy_bytes_per_s)


def fit_attention(rows: list[dict], *, peak: dict[str, float], sms: int, latency: float) -> dict:
    """Efficiency of fused attention per dtype and direction from attention rows (``b, h, s,
    d, dtype, causal, fwd_s, bwd_s``, as `calibrate_gpu.measure_attention` writes them): the
    median over rows of FLOPs done (causal tiles skipped) / (peak · occupancy · (time − latency))."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        dt = DTYPES[r["dtype"]]
        bh = r["b"] * r["h"]
        blocks = bh * math.ceil(r["s"] / ATTENTION_BLOCK)
        occupancy = bh * r["s"] / (math.ceil(blocks / sms) * sms * ATTENTION_BLOCK)
        for direction, key in (("forward", "fwd_s"), ("backward", "bwd_s")):
            flops = attention_flops(bh, r["s"], r["s"], r["d"], causal=r["causal"], backward=direction == "backward")
            eff = flops / (peak[dt] * occupancy * max(r[key] - latency, 1e-9))
            out.setdefault(dt, {}).setdefault(direction, []).append(eff)
    return {dt: {d: min(1.0, statistics.median(v)) for d, v in dirs.items()} for dt, dirs in out.items()}


def fit_reference(reference: dict, *, peak: dict[str, float], sms: int) -> dict:
    """Every parameter this module fits, from one reference dict (module docstring)."""
    gemm = fit_gemm(reference["gemm"], peak=peak, sms=sms)
    out = {"gemm": gemm, "host": fit_host(reference["host_per_op_us"]),
           "memory_bandwidth": fit_bandwidth(reference["copy_bytes_per_s"])}
    if reference.get("attention"):
        out["attention"] = fit_attention(reference["attention"], peak=peak, sms=sms, latency=gemm["latency"])
    return out
