"""`mgpukit bench launch`: how long from `launch()` to every rank's value back, with an
all-reduce in between — the fixed cost every notebook cell that launches pays."""
from __future__ import annotations

import statistics
import time
import warnings

import torch
import torch.distributed as dist

from mgpukit.bench import bench
from mgpukit.runtime.launcher import OversubscribedWarning, launch


def _all_reduce_once():
    t = torch.ones(1024)
    dist.all_reduce(t)
    return float(t[0])


@bench("launch", help="time to launch N CPU workers, all-reduce, and return (target <= 3 s for 4)")
def bench_launch(args=None) -> dict:
    workers = getattr(args, "workers", None) or 4
    repeats = getattr(args, "repeats", None) or 3
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with warnings.catch_warnings():  # more workers than cores is the point here
            warnings.simplefilter("ignore", OversubscribedWarning)
            out = launch(_all_reduce_once, workers, mode="cpu", echo=False)
        times.append(time.perf_counter() - start)
        assert out == [float(workers)] * workers
    result = {"workers": workers, "seconds": times, "median_s": statistics.median(times),
              "target_s": 3.0, "ok": statistics.median(times) <= 3.0}
    print(f"launch {workers} CPU workers + all-reduce + return (measured, {repeats} runs): "
          f"median {result['median_s']:.2f} s, runs {', '.join(f'{t:.2f}' for t in times)} "
          f"— target <= 3 s: {'ok' if result['ok'] else 'MISSED'}")
    return result
