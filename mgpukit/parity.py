"""Parity: a run's numbers against the single-process reference trained on the same batches.

The strategy's logged losses and gradient norms (per step) and its final weights are
compared with the `single` reference trained on the same global batches, at torch's default
fp32 tolerances (`torch.testing.assert_close`: rtol 1.3e-6, atol 1e-5) unless the strategy
states its own (pipelines: PyTorch's pipelining tolerances; lossy compression: a loss-curve
check) or the layout trains in bf16 / fp16 (every step's loss within 5% of the fp32
reference's). The gradient norm is what catches a missing average: Adam's update barely
changes if every gradient is doubled, but the norm does.
"""
from __future__ import annotations

import math

import torch

from mgpukit.strategies.policies.precision import loss_curve_parity
from mgpukit.strategies.registry import Strategy

FP32_TOL = {"rtol": 1.3e-6, "atol": 1e-5}  # torch.testing.assert_close defaults for float32


def _max(diff: torch.Tensor) -> float:
    """The largest element, NaN if any is NaN (torch's max propagates NaN)."""
    return float(diff.max()) if diff.numel() else 0.0


def _nan_max(a: float, b: float) -> float:
    """max() that keeps NaN: Python's `max(0.0, nan)` is 0.0, which reported a NaN run as exact."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def compare(record: dict, weights: dict | None, ref: dict, tol: dict | None) -> dict:
    """Losses, gradient norms and final weights against the reference, elementwise with tolerance."""
    tol = tol or FP32_TOL
    ref_record, ref_weights = ref["record"], ref["weights"]
    checks = {
        "losses": (record["losses"], ref_record["losses"]),
        "grad_norms": (record["grad_norms"], ref_record["grad_norms"]),
    }
    out = {"reference": ref_record["strategy"], "tolerance": dict(tol)}
    ok = True
    worst = 0.0
    for name, (got, want) in checks.items():
        got_t, want_t = torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
        if got_t.shape != want_t.shape:
            out[f"{name}_max_abs_diff"] = math.inf
            ok = False
            continue
        diff = (got_t - want_t).abs()
        out[f"{name}_max_abs_diff"] = _max(diff)
        ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want_t.abs()))
        worst = _nan_max(worst, out[f"{name}_max_abs_diff"])
    if weights is None:
        out["weights_max_abs_diff"] = None
        out["weights_checked"] = False
    else:
        missing = sorted(set(ref_weights) ^ set(weights))
        if missing:
            raise ValueError(f"weights returned by the strategy don't match the reference's names: {missing[:5]}")
        wdiff = 0.0
        for k, want in ref_weights.items():
            got = weights[k].to(want.dtype)
            diff = (got - want).abs()
            wdiff = _nan_max(wdiff, _max(diff))
            ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want.abs()))
        out["weights_max_abs_diff"] = wdiff
        out["weights_checked"] = True
        worst = _nan_max(worst, wdiff)
    out["max_abs_diff"] = worst
    out["ok"] = bool(ok)
    return out


def check_parity(record: dict, weights: dict | None, ref: dict, *, strategy: Strategy, layout,
                 tolerance: dict | None = None) -> dict:
    """The parity entry of `record`: the strategy's own check (`Strategy.compare`, tolerance)
    or `compare`; in bf16 / fp16, the loss curve (reduced precision changes the numbers on purpose)."""
    check, tol = strategy.compare or compare, tolerance or strategy.tolerance
    if layout.dtype != "fp32":
        check, tol = loss_curve_parity(), tolerance
    return check(record, weights, ref, tol)
