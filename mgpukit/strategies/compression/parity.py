"""What "correct" means for a compressed run, and `run_compressed`, which runs one with its check.

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

`plot_loss_parity` quotes a record's parity; for the loss-curve check its `max_abs_diff` is
the largest per-step loss difference and `ok` the final-loss verdict (`method` says so).
"""
from __future__ import annotations

import dataclasses

from mgpukit.config import RunConfig
from mgpukit.strategies.compression import half, int8, powersgd, topk

CHECKS = {
    "dp-fp16": {"kind": "elementwise", "tolerance": half.TOLERANCE["dp-fp16"]},
    "dp-bf16": {"kind": "elementwise", "tolerance": half.TOLERANCE["dp-bf16"]},
    "dp-int8": {"kind": "loss_curve", "rtol": int8.LOSS_RTOL},
    "dp-topk": {"kind": "loss_curve", "rtol": topk.LOSS_RTOL},
    "dp-powersgd": {"kind": "loss_curve", "rtol": powersgd.LOSS_RTOL},
}


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
        "max_rel_gap": max(abs(a - b) / abs(b) for a, b in zip(got, want)),
        "max_abs_diff": max(abs(a - b) for a, b in zip(got, want)),
        "ok": bool(gap <= rtol),
    }


def fp32_reference(cfg: RunConfig, *, timeout_s: float = 600.0) -> dict:
    """The `single` fp32 record for `cfg` (options dropped), run once per process.

    One thread: on a shared 2-core machine a 2-thread reference slows down erratically
    (OpenMP barriers under oversubscription). The run also lands in `mgpukit.experiment`'s
    reference cache, so the elementwise parity of `dp-fp16`/`dp-bf16` reuses it.
    """
    from mgpukit.experiment import run

    base = cfg.replace(options={})
    if base.key() not in _REFERENCES:
        _REFERENCES[base.key()] = run("single", workers=1, mode="cpu", config=base, parity=False,
                                      threads_per_worker=1, timeout_s=timeout_s)
    return _REFERENCES[base.key()]


_REFERENCES: dict[str, dict] = {}


def run_compressed(name: str, *, rtol: float | None = None, **kwargs) -> dict:
    """`mgpukit.run(name, **kwargs)` with the strategy's own check as `record["parity"]`.

    Elementwise methods get their loosened tolerance; loss-curve methods are compared with the
    `single` reference of the same config (`rtol` overrides the stated one). Any other strategy
    (e.g. `ddp`, the fp32 baseline) runs with its usual parity check.
    """
    from mgpukit.experiment import run

    check = CHECKS.get(name)
    parity = kwargs.pop("parity", True)
    if parity and (check is not None or name == "ddp"):
        fp32_reference(_config_of(kwargs), timeout_s=kwargs.get("timeout_s", 600.0))
    if check is None or not parity:
        return run(name, parity=parity, **kwargs)
    if check["kind"] == "elementwise":
        return run(name, tolerance=kwargs.pop("tolerance", check["tolerance"]), **kwargs)
    record = run(name, parity=False, **kwargs)
    ref = fp32_reference(RunConfig(**record["config"]), timeout_s=kwargs.get("timeout_s", 600.0))
    record["parity"] = loss_parity(record, ref, rtol=rtol if rtol is not None else check["rtol"])
    return record


def _config_of(kwargs: dict) -> RunConfig:
    """The RunConfig `mgpukit.run` will build from these arguments (config + field overrides)."""
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    return (kwargs.get("config") or RunConfig()).replace(**{k: v for k, v in kwargs.items() if k in fields})
