"""Notebook 03's drivers: run a compressor with its own check, and the fp32 reference."""
from __future__ import annotations

from mgpukit.config import RunConfig
from mgpukit.experiment import reference, run


def fp32_reference(cfg: RunConfig, *, timeout_s: float = 600.0) -> dict:
    """The `single` fp32 record for `cfg` (options dropped), run once per process — the same
    cached reference every parity check of the runner uses."""
    return reference("single", cfg, timeout_s=timeout_s)["record"]


def run_compressed(name: str, *, rtol: float | None = None, **kwargs) -> dict:
    """`mgpukit.run(name, **kwargs)`: the strategy's own check is the record's parity
    (elementwise at its loosened tolerance, or the loss-curve check); `rtol` overrides the
    loss-curve tolerance."""
    if rtol is not None:
        kwargs["tolerance"] = {"rtol": rtol}
    return run(name, **kwargs)
