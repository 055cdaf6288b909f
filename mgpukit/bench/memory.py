"""`mgpukit bench memory`: do the ZeRO stages hold and send what the formulas say?

Measured in this one run on CPU workers (gloo), gpt-tiny with AdamW (fp32: the paper's
``4Ψ + 4Ψ + 8Ψ`` per rank before sharding):

1. **bytes per rank** of parameters, gradients and optimizer states for DDP, zero1, zero2,
   zero3 and fsdp2, next to the cost model's ZeRO table (`costmodel.memory.model_state_bytes`);
   target: within 5%.
2. **bytes sent per step** (ring bus bytes, as the recorder counts them) next to the cost
   model's (`costmodel.volume.dp_collective_bytes`): zero1 and zero2 ≈ DDP, zero3 ≈ 1.5× DDP;
   target: within 5%.
3. **zero3 / fsdp2 step time** — our hand-written ZeRO-3 against PyTorch's FSDP2, interleaved
   runs, medians, warm-up steps dropped (target ≤ 1.3).
"""
from __future__ import annotations

from mgpukit.bench import bench
from mgpukit.studies.warm import warm_parent
from mgpukit.studies.sharding import sharding_study, step_time_ratio

TOLERANCE = 0.05


def _mb(x: float) -> str:
    return f"{x / 2**20:7.3f}"


@bench("memory", help="ZeRO-1/2/3 and FSDP2: bytes per rank and bytes sent vs the formulas (5%), "
                      "zero3 / fsdp2 step time (<=1.3)")
def bench_memory(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    workers = getattr(args, "workers", None) or 2
    repeats = getattr(args, "repeats", None) or (1 if quick else 3)
    warm_parent()
    study = sharding_study(workers=workers, steps=2 if quick else 3, parity=not quick)
    timing = step_time_ratio(workers=workers, steps=6 if quick else 12, repeats=repeats,
                             warmup=2 if quick else 4)
    rows = study["rows"]
    for r in rows:
        r["memory_ok"] = all(abs(r["measured"][c] / r["predicted"][c] - 1) <= TOLERANCE
                             for c in r["measured"] if r["predicted"][c])
        r["comm_ok"] = abs(r["comm_ratio"] - 1) <= TOLERANCE
    print(f"measured on {workers} CPU workers (gloo), {study['model']} (Ψ = {study['psi']:,} "
          f"parameters), {study['optimizer']}, fp32; MiB per rank (largest rank), predicted = "
          f"cost model's ZeRO formulas")
    print(f"  {'strategy':<9}{'params':>16}{'grads':>18}{'optimizer':>18}   {'MB sent/step':>18}  "
          f"{'vs DDP':>6}  within 5%")
    print(f"  {'':<9}" + f"{'meas.':>9}{'pred.':>8}" + f"{'meas.':>10}{'pred.':>8}" * 2
          + f"   {'meas.':>9}{'pred.':>9}")
    for r in rows:
        m, p = r["measured"], r["predicted"]
        cells = "".join(f"  {_mb(m[c])} {_mb(p[c])}" for c in ("params", "grads", "optimizer"))
        vs = f"{r['comm_vs_ddp']:.2f}×" if r["comm_vs_ddp"] is not None else "—"
        ok = "ok" if r["memory_ok"] and r["comm_ok"] else "MISSED"
        print(f"  {r['strategy']:<9}{cells}   {r['bytes_sent_per_step'] / 1e6:9.3f}"
              f"{r['predicted_bytes_per_step'] / 1e6:9.3f}  {vs:>6}  {ok}")
    print(f"  zero3 / fsdp2 step time  {timing['ratio']:.2f}  (median of {timing['repeats']} "
          f"interleaved pairs, {timing['steps']} steps each, first {timing['warmup']} dropped) — "
          f"target <= 1.3: "
          f"{'ok' if timing['ratio'] <= 1.3 else 'MISSED'}")
    return {"psi": study["psi"], "rows": rows, "step_time_ratio": timing,
            "ok": all(r["memory_ok"] and r["comm_ok"] for r in rows) and timing["ratio"] <= 1.3}
