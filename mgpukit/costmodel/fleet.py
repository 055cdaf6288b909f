"""The slowest of N GPUs: what a synchronous step pays for the spread of GPU speeds in a fleet.

A step of data, tensor and pipeline parallelism waits at every collective and every pipeline
hand-off, so it runs at the pace of its **slowest** GPU. GPUs of one SKU do not run a matmul
equally fast: under a sustained load each sits at its power or thermal limit, and how fast it
runs there depends on its own silicon (its voltage–frequency curve) and on how well it is cooled.
If one GPU's sustained matmul rate is the fleet's median slowed by a fraction drawn from a
normal distribution of spread ``σ``, the slowest of ``N`` is slower than the median by about
``σ · E[max of N standard normals]`` — 0 for one GPU, 1.42 σ for 8, 3.2 σ for 1,024, 3.8 σ
for 16,384 (:func:`expected_max`). The planner adds that fraction of the critical path's
GEMM seconds as its own term, ``straggler_s`` (:func:`mgpukit.costmodel.steptime.step_time`).

**The spread.** A profile states it as ``[scale] gpu_spread`` (a fraction), and only where its
GEMM rate is **one GPU's measurement** (h100-*, h200: fitted on one idle H200). The A100
profiles' rate was read off whole training runs on 32-3,072 GPUs (Narayanan et al. 2021), so
the pace of their slowest GPU is already inside it: they leave ``gpu_spread`` out (0).

The figure, 0.0176 (1.76 %), is the one measurement of the matmul spread of GPUs of a current
SKU we could read, S. Bekman, *Machine Learning Engineering* (github.com/stas00/ml-engineering,
chapter "Accelerators", section "Not all accelerators are created equal"): "I have seen 5% and
higher differences on an 8-gpu node" of the maximum achievable matmul FLOPS (cause given:
manufacturing, and above all uneven cooling; "that slowest accelerator (struggler) will set the
speed for all other accelerators"). A 5 % range among 8 draws of a normal is 5 % / E[range of
8] = 5 % / 2.847 = 1.76 %. It is an anecdote of one node, not a fleet's histogram; the one
fleet-scale study, Sinha et al., SC22 ("Not All GPUs Are Created Equal", arXiv:2208.11035:
> 90 % of the V100 / MI60 GPUs of Summit, Vortex, Frontera, Longhorn and Corona) reports "8%
(max 22%) average performance variation … with outliers up to 1.5X slower than the median
GPU" — the same order, on older GPUs. Outliers (a failing GPU, 1.5× slower) are not modelled:
large jobs screen them out and replace them. What a normal tail cannot say either: whether the
fleet's real tail is longer or shorter than normal at 1-in-16,384.

Not modelled: time-varying slowdowns (Llama 3, §3.3.4: "a diurnal 1-2% throughput variation"
with mid-day temperature, which moves every GPU together), network stragglers, load imbalance.
"""
from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

_NORMAL = NormalDist()


@lru_cache(maxsize=None)
def expected_max(n: int) -> float:
    """E[max of ``n`` independent standard normals] (0 for ``n = 1``): the integral of
    ``x · n φ(x) Φ(x)^(n-1)`` by the trapezoid rule on [-8, 9] (accurate to ~1e-6)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    steps, lo, hi = 6800, -8.0, 9.0
    h = (hi - lo) / steps
    total = 0.0
    for i in range(steps + 1):
        x = lo + i * h
        w = 0.5 if i in (0, steps) else 1.0
        total += w * x * n * _NORMAL.pdf(x) * math.exp((n - 1) * math.log(max(_NORMAL.cdf(x), 1e-300)))
    return total * h


def expected_range(n: int) -> float:
    """E[max − min of ``n`` standard normals] = 2 · :func:`expected_max` (symmetry)."""
    return 2.0 * expected_max(n)


def slowest_fraction(gpus: int, spread: float) -> float:
    """How much slower the slowest of ``gpus`` GPUs runs a matmul than the median one, when their
    sustained rates spread normally by ``spread`` (a fraction): ``spread · E[max of gpus]``."""
    if spread < 0:
        raise ValueError(f"spread must be >= 0, got {spread}")
    return spread * expected_max(gpus)
