"""Notebook 10, profiling: one run seen by torch.profiler and by the kit's own trace, side by side.

`profile_run` turns both on for one short run (`torch_profile_dir`, `trace_path`) and returns
PyTorch's operator view of rank 0 (its ops by CPU time) beside the kit's timeline summed by
stream and kind: the same step, one in torch's operators, one in the kit's phases.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from mgpukit.experiment import run


def profile_run(out: str | Path, *, strategy: str = "ddp", steps: int = 3) -> dict:
    """One run with torch.profiler on (`torch_profile_dir`) and the kit's own trace: returns
    the record, the trace paths, and PyTorch's operator view of rank 0 (top ops by CPU time)."""
    out = Path(out)
    rec = run(strategy, workers=2, steps=steps, parity=False, torch_profile_dir=out / "torch",
              trace_path=out / "kit-trace.json")
    trace = json.loads((out / "torch" / f"{strategy}-rank0.json").read_text())
    ops = defaultdict(lambda: [0.0, 0])
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") == "cpu_op":
            ops[ev["name"]][0] += ev.get("dur", 0.0) / 1e3
            ops[ev["name"]][1] += 1
    top = sorted(({"op": k, "total_ms": v[0], "calls": v[1]} for k, v in ops.items()),
                 key=lambda r: -r["total_ms"])
    kit = defaultdict(float)
    for ev in rec["timeline"]:
        if ev["rank"] == 0:
            kit[f'{ev["stream"]}:{ev["kind"]}'] += (ev["end"] - ev["start"]) * 1e3
    return {"record": rec, "torch_trace": out / "torch" / f"{strategy}-rank0.json",
            "kit_trace": out / "kit-trace.json", "torch_ops": top,
            "kit_ms": dict(sorted(kit.items(), key=lambda kv: -kv[1])), "events": len(trace.get("traceEvents", []))}
