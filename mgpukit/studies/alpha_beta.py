"""Notebook 02: one all-reduce under the alpha-beta model (Hockney 1994; the ring's bus
bandwidth as nccl-tests defines it) — no launch, the cost model alone.

- `predict_all_reduce(nbytes, n, algorithm, profile)`: predicted time, bus bandwidth and the
  share of the time latency takes, for the ring, recursive halving-doubling ("tree") or naive
- `describe_prediction(p)`: that prediction in one line
"""
from __future__ import annotations

import math

from mgpukit.costmodel import comm as cost
from mgpukit.costmodel.hardware import load_profile
from mgpukit.strategies.communication.collectives import predicted_time

ALGORITHMS = ("ring", "tree", "naive")
def predict_all_reduce(nbytes: float, n: int, algorithm: str = "ring", profile="h100-nvlink") -> dict:
    """Predicted time and bus bandwidth of one all-reduce (alpha-beta model; "tree" is
    recursive halving-doubling, power-of-two `n` only). The link is picked from the ranks' span:
    NVLink inside a node, the network beyond (`costmodel.comm.link_for_ranks`)."""
    hw = load_profile(profile)
    link = cost.link_for_ranks(range(n), hw)
    if algorithm == "ring":
        t = cost.allreduce_time(nbytes, n, link)
    else:
        t = predicted_time(algorithm, nbytes, n, link)
    latency = {"ring": 2 * (n - 1), "naive": 2 * (n - 1), "tree": 2 * math.log2(n)}[algorithm] * link.alpha
    return {"algorithm": algorithm, "bytes": nbytes, "n": n, "profile": hw.name,
            "link": {"alpha": link.alpha, "beta": link.beta},
            "time_s": t, "busbw": cost.bus_factor("all_reduce", n) * nbytes / t if t else math.inf,
            "latency_share": latency / t if t else 0.0}


def describe_prediction(p: dict) -> str:
    """One line for a prediction from `predict_all_reduce`."""
    return (f"{p['algorithm']} all-reduce of {p['bytes'] / 2**20:.3g} MiB on {p['n']} × {p['profile']}: "
            f"{p['time_s'] * 1e6:,.1f} µs, bus bandwidth {p['busbw'] / 1e9:.3g} GB/s "
            f"(link α = {p['link']['alpha'] * 1e6:.3g} µs, β = {p['link']['beta'] / 1e9:.3g} GB/s; "
            f"latency is {p['latency_share']:.0%} of the time) — predicted")
