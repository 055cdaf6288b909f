"""Where an emulated step's time went, from the virtual clock's split (`vclock.py`).

Each emulated rank records per step (`rec.extra["time_split"]`): the step, the device
stream's time split into `kernel` (busy), `launch_wait` (idle, waiting for the host to issue
the next kernel) and `wait` (idle, waiting for a collective, a message or data), and `host`
(what the host spent dispatching and launching). On a GPU profile `kernel + launch_wait + wait`
is the step; on a CPU worker (`this-machine`) the host's dispatch is part of the stream's time,
so `kernel + host + wait` is.

**Launch-bound fraction** `host / step`: the share of the step the host was busy issuing
work. Near 1, the GPU waits for Python and the dispatcher, not for its kernels: a bigger batch
costs almost nothing more per step, and CUDA graphs (one launch replays the whole step) or
`torch.compile` (fused kernels, fewer of them; mode "reduce-overhead" adds CUDA graphs) are
what speeds it up.
"""
from __future__ import annotations

import statistics


def time_split(record: dict, rank: int = 0) -> dict | None:
    """The median steady step of `rank` (the first step skipped when there are others), its
    parts in seconds and `launch_bound` = host / step. None for a measured record."""
    steps = ((record.get("extra") or {}).get(str(rank)) or {}).get("time_split")
    if not steps:
        return None
    steady = steps[1:] if len(steps) > 1 else steps
    out = {k: statistics.median(s[k] for s in steady) for k in steady[0]}
    out["launch_bound"] = out["host_s"] / out["step_s"] if out["step_s"] > 0 else 0.0
    return out


def describe_time_split(split: dict) -> str:
    """One line: the step and where its time went."""
    step = split["step_s"]

    def pct(key):
        return f"{split[key] / step:.0%}" if step > 0 else "-"

    return (f"step {step * 1e3:.3g} ms: kernels busy {pct('kernel_s')}, waiting for the host "
            f"{pct('launch_wait_s')}, waiting for communication/data {pct('wait_s')}; host busy "
            f"{pct('host_s')} (launch-bound fraction {split['launch_bound']:.2f})")
