"""Error bands that cover runs the planner has not seen: a prediction interval from past errors.

The planner's error on a published run is ``e = predicted / published − 1`` on throughput
(:mod:`~mgpukit.costmodel.validation`; positive: optimistic, the real step is longer). The
lowest and highest ``e`` of a handful of runs is not a band for the next run: of ``n`` draws of
the same error, the next one falls outside their range with probability ``2 / (n + 1)``
(order statistics: a new draw is equally likely to take any of the ``n + 1`` ranks), a third of
the time for ``n = 2``. So the band is the **prediction interval for one new observation**
(e.g. Hahn & Meeker, *Statistical Intervals*, 1991, §4.6; NIST/SEMATECH e-Handbook §7.2.2):

    center ± t(0.975, df) · sqrt(s_w² · (1 + 1/n) + s_b²)

* ``center``: the mean error of the ``n`` runs of this framework on this GPU generation;
* ``s_w``: the spread of errors *within* a (framework, generation) group, pooled over every
  group of the table (one run alone says nothing of spread; ten runs of one framework do), with
  ``df = Σ (n_g − 1)`` degrees of freedom — Student's ``t`` widens the band where they are few;
* ``1/n``: the center itself is an estimate from ``n`` runs (wide when ``n`` is 1 or 2);
* ``s_b``: where the generation at hand has **no** run of the framework, its offset is unknown:
  the spread of the group means across generations (or across frameworks, when the framework
  ran on one generation only) is added — the planner's error on A100 Megatron runs says only so
  much about an H100.

The band is then widened to hold every observed error (it never excludes a run it rests on).
It is a statement about errors of the kind the table holds, no more: configurations none of
the runs used are named beside it (``error_bars.unchecked``).

The **memory band** is the same interval over the planner's closed-form peak
(:func:`~mgpukit.costmodel.memory.allocator_peak`) against the CUDA allocator's peaks of the
reference steps measured on one H200 and one H100 (``data/reference/*.json``): ``e =
predicted / measured − 1`` (positive: the planner charges more than the GPU held). Those are
single-GPU steps, each configuration counted once (the H200's and the H100's peaks of the same
step differ by bytes, and counting both would narrow the band for nothing): the sharding terms (tp, pp, ZeRO) are not checked by them.
"""
from __future__ import annotations

import json
import math
import statistics
from functools import lru_cache
from pathlib import Path

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import allocator_peak
from mgpukit.costmodel.shapes import ModelShape

# Two-sided 95 % quantiles of Student's t, t(0.975, df) for df = 1 … 30 (any table, e.g. NIST/SEMATECH
# e-Handbook of Statistical Methods, Table 1.3.6.7.2); beyond 30 the normal's 1.96 is within 3 %.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# GPU generations: profiles of the same die share kernels, so their errors are one group (h200:
# the GH100 die of the H100 with faster HBM, data/hardware/h200.toml).
GENERATIONS = {"a100": "A100 (Ampere)", "h100": "H100/H200 (Hopper)", "h200": "H100/H200 (Hopper)"}
REFERENCE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference"
# The kit's GPTs the reference files measured (vocab, seq, layers, heads, d), as `mgpukit.models.gpt`
# builds them: read from data (`mgpukit plan` never imports torch); tests/test_error_bands.py holds them equal.
KIT_GPTS = {name: tuple(dims) for name, dims in
            json.loads((REFERENCE_DIR / "kit_models.json").read_text())["models"].items()}


def t975(df: int) -> float:
    """Student's t at 0.975 with ``df`` degrees of freedom (the normal's 1.96 beyond 30)."""
    if df < 1:
        raise ValueError(f"a prediction interval needs at least 1 degree of freedom, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def generation(profile: str) -> str:
    """The GPU generation of a hardware profile (``h100-ib`` → Hopper); other profiles are their
    own generation, with no published run."""
    return GENERATIONS.get(profile.split("-")[0], profile)


def pooled_within_sd(groups: dict) -> tuple[float, int]:
    """The within-group standard deviation pooled over ``groups`` (key → list of errors), and its
    degrees of freedom ``Σ (n_g − 1)``."""
    ss = sum(sum((e - statistics.fmean(g)) ** 2 for e in g) for g in groups.values() if len(g) > 1)
    df = sum(len(g) - 1 for g in groups.values())
    return (math.sqrt(ss / df) if df else 0.0), df


def between_sd(means: list[float]) -> float:
    """The spread of group means (0 with fewer than two groups)."""
    return statistics.stdev(means) if len(means) > 1 else 0.0


def prediction_band(errors: list[float], *, within_sd: float, df: int, between: float = 0.0) -> tuple[float, float]:
    """``(low, high)``: the prediction interval for one new error (module docstring), widened to
    hold every error in ``errors``."""
    n = len(errors)
    center = statistics.fmean(errors)
    half = t975(df) * math.sqrt(within_sd ** 2 * (1 + 1 / n) + between ** 2)
    return min(center - half, min(errors)), max(center + half, max(errors))


def kit_gpt_shape(name: str):
    """The :class:`~mgpukit.costmodel.shapes.ModelShape` of one of the kit's GPTs (:data:`KIT_GPTS`)."""
    vocab, seq, layers, heads, d = KIT_GPTS[name]
    return ModelShape(name=name, vocab=vocab, seq_len=seq, n_layer=layers, n_head=heads, d_model=d, d_ff=4 * d,
                      bias=True, dropout=False, fused_qkv=False)


@lru_cache(maxsize=1)
def memory_rows() -> tuple[dict, ...]:
    """Every measured single-GPU peak of the reference files beside the planner's closed form:
    ``{"config", "device", "measured", "predicted", "error"}``."""

    rows, seen = [], set()
    for path, profile in (("h200-2026-11-26.json", "h200"), ("h100-2026-11-26.json", "h100-nvlink")):
        ref = json.loads((REFERENCE_DIR / path).read_text())
        steps = {**ref.get("plain_pytorch_steps_beside_emulation", {}), **ref["plain_pytorch_steps"]}
        for key, real in steps.items():
            if key in seen:  # the same step on a second GPU: the same closed form, nearly the same peak
                continue
            seen.add(key)
            model, batch, dtype, optimizer = key.split()
            shape = kit_gpt_shape(model)
            peak = allocator_peak(shape, Layout(micro_batch=int(batch[1:]), dtype=dtype),
                                  optimizer_states=0 if optimizer == "sgd" else 2, grads_persist=False,
                                  autocast=dtype == "bf16", workspace=load_profile(profile).blas_workspace)["peak"]
            rows.append({"config": key, "device": ref["device"], "measured": real["peak_bytes"], "predicted": peak,
                         "error": peak / real["peak_bytes"] - 1})
    return tuple(rows)
