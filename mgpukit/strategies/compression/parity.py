"""What "correct" means for a compressed run: the loss-curve check of the lossy methods.

A compressor changes the numbers on purpose, so torch's fp32 tolerances cannot hold. Each
strategy states what it is compared with, against the fp32 `single` reference trained on the
same global batches:

=============  ==========================================================================
dp-fp16        elementwise, as every strategy (losses, gradient norms, final weights), at
dp-bf16        the loosened tolerances of `half.TOLERANCE`
dp-int8        loss curve: final loss (mean of the last `window` steps) within `LOSS_RTOL`
dp-topk        (relative) of the reference's; the largest per-step gap is reported, not
dp-powersgd    checked — a compressor may lag early and catch up
=============  ==========================================================================

Each strategy registers its check (`tolerance=` or `compare=loss_curve_check(...)`); the one
runner applies it. `plot_loss_parity` quotes a record's parity; for the loss-curve check its `max_abs_diff` is
the largest per-step loss difference and `ok` the final-loss verdict (`method` says so).
"""
from __future__ import annotations

import math


def loss_parity(record: dict, ref_record: dict, *, rtol: float, window: int = 5) -> dict:
    """Compare the loss curve of `record` with the reference's: final loss within `rtol`."""
    got, want = list(record["losses"]), list(ref_record["losses"])
    if len(got) != len(want):
        raise ValueError(f"loss curves differ in length ({len(got)} vs {len(want)} steps).")
    w = max(1, min(window, len(got)))
    final, ref_final = sum(got[-w:]) / w, sum(want[-w:]) / w
    gap = abs(final - ref_final) / abs(ref_final)
    return {
        "reference": ref_record["strategy"],
        "method": f"final loss (mean of last {w} steps) within rtol of the reference's",
        "tolerance": {"rtol": rtol},
        "final_loss": final,
        "reference_final_loss": ref_final,
        "final_rel_gap": gap,
        "max_rel_gap": _nan_max(abs(a - b) / abs(b) for a, b in zip(got, want)),
        "max_abs_diff": _nan_max(abs(a - b) for a, b in zip(got, want)),
        "ok": bool(gap <= rtol),
    }


def _nan_max(values) -> float:
    """max() that keeps NaN (Python's max drops a NaN that is not first)."""
    values = list(values)
    return math.nan if any(math.isnan(v) for v in values) else max(values)
