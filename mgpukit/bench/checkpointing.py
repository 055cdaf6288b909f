"""`mgpukit bench checkpointing`: what activation checkpointing saves and what it costs.

On the default GPT (gpt-tiny, global batch 8), one worker, one thread: the measured peak
activation bytes (`ActivationMeter`: what forward keeps plus what backward recomputes) and the
median step time, for no checkpointing, selective (the attention core) and full (every block).
Target: full keeps at most half the activations of none. The recompute overhead is the step
time ratio (one more forward: expect about 1.3×; a forward is ~1/3 of a step).
"""
from __future__ import annotations

from mgpukit.bench import bench
from mgpukit.studies.checkpointing import measure_checkpointing


@bench("checkpointing", help="activation peak and step time: none vs selective vs full checkpointing")
def checkpointing_bench(args) -> dict:
    quick = getattr(args, "quick", False)
    repeats = getattr(args, "repeats", None) or (1 if quick else 3)
    rows = measure_checkpointing(steps=4 if quick else 12, repeats=repeats)
    print(f"{'checkpointing':<14}{'activations KiB':>16}{'vs none':>9}{'step ms':>10}{'vs none':>9}")
    for r in rows:
        print(f"{r['checkpointing']:<14}{r['activations_bytes'] / 1024:>16.0f}{r['activations_vs_none']:>9.2f}"
              f"{r['step_time_s'] * 1e3:>10.1f}{r['time_vs_none']:>9.2f}")
    full = next(r for r in rows if r["checkpointing"] == "full")
    ok = full["activations_vs_none"] <= 0.5
    print(f"full checkpointing keeps {full['activations_vs_none']:.0%} of the activations "
          f"(target <= 50%: {'ok' if ok else 'MISSED'}); recompute overhead "
          f"{full['time_vs_none'] - 1:+.0%} step time (measured, wall clock)")
    return {"rows": [{k: v for k, v in r.items() if k != "losses"} for r in rows],
            "target": 0.5, "ok": ok}
