"""`mgpukit bench search`: how long `mgpukit plan --search` takes for a 70B model on 64 and on
1,024 H100s (targets: under 2 s and under 5 s wall, interpreter start included), how many
layouts it considers, and that every fitting layout it returns is within the profile's memory.

Wall time is measured twice: the whole command in a fresh interpreter (what a user waits
for) and `planner.search` alone in this process (median of `repeats`)."""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

from mgpukit.bench import bench
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.planner import candidate_layouts, search
from mgpukit.costmodel.shapes import get_shape

CASES = (("70b", 64, 2.0), ("70b", 1024, 5.0))
PROFILE = "h100-ib"
GLOBAL_BATCH = 512


def search_timing(model: str, gpus: int, *, repeats: int = 3, profile: str = PROFILE) -> dict:
    """Candidates, fitting plans, in-process search seconds and the whole command's wall seconds."""
    hw, shape = load_profile(profile), get_shape(model)
    candidates = sum(1 for _ in candidate_layouts(shape, gpus, hw, global_batch=GLOBAL_BATCH))
    times, plans = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        plans = search(shape, gpus, hw, global_batch=GLOBAL_BATCH, include_unfit=True)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mgpukit.cli", "plan", "--model", model, "--gpus", str(gpus),
                           "--profile", profile, "--global-batch", str(GLOBAL_BATCH), "--search"],
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    fitting = [p for p in plans if p.fits]
    return {"model": model, "gpus": gpus, "profile": profile, "candidates": candidates,
            "search_s": statistics.median(times), "command_wall_s": wall, "command_ok": proc.returncode == 0,
            "fitting_returned": len(fitting),
            "all_within_memory": all(p.memory["total"] <= p.memory_limit for p in fitting)}


@bench("search", help="`mgpukit plan --search` wall time, 70B on 64 and 1,024 H100 (targets < 2 s, < 5 s)")
def bench_search(args=None) -> dict:
    repeats = getattr(args, "repeats", None) or 3
    rows = []
    print(f"{'model':<6} {'GPUs':>5} {'candidates':>10} {'search':>9} {'command':>9} {'target':>7}  fits memory")
    for model, gpus, target in CASES:
        r = search_timing(model, gpus, repeats=repeats)
        r["target_s"], r["within_target"] = target, r["command_wall_s"] < target
        rows.append(r)
        print(f"{model:<6} {gpus:>5} {r['candidates']:>10,} {r['search_s']:>8.2f}s {r['command_wall_s']:>8.2f}s "
              f"{target:>6.0f}s  {'yes' if r['all_within_memory'] else 'NO'}"
              f"{'' if r['within_target'] else '  (over target)'}")
    return {"rows": rows}
