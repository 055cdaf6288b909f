"""`mgpukit bench pipeline`: pipeline schedules measured against their theory, and the
hand-written executor timed against torch.distributed.pipelining.

Setting (say it with every figure):

- **emulated** runs, virtual clock of profile ``h100-nvlink`` with **point-to-point made
  free** (alpha = 0, unlimited bandwidth — the theory then has no p2p term either), on the
  lab's *square MLP* whose stages cost exactly the same (``mgpukit.studies.pipeline_lab``),
  p = 4 ranks, m = 8 micro-batches of 8 rows;
- the executor's overhead: **measured** wall clock, CPU workers (gloo), ``gpt-tiny``,
  ``pp-1f1b`` vs ``pp-native-1f1b`` with the same split, schedule and micro-batches
  (median step time, first step skipped, best of 3 alternating rounds; 2 with --quick).
"""
from __future__ import annotations

import statistics
import warnings

from mgpukit.bench import bench
from mgpukit.experiment import run
from mgpukit.studies.pipeline_lab import run_lab
from mgpukit.measure.idle import predicted_from_costs
from mgpukit.runtime.launcher import OversubscribedWarning

P, M, ROWS = 4, 8, 8


def _memory_rows(records) -> dict:
    return {r["strategy"]: [r["extra"][str(k)]["activations_in_flight_peak"]
                            for k in range(r["world_size"])] for r in records}


def _overhead(p: int, steps: int, rounds: int) -> dict:
    med = {"pp-1f1b": [], "pp-native-1f1b": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        for _ in range(rounds):
            for name in med:
                rec = run(name, workers=p, mode="cpu", steps=steps, micro_batches=2 * p,
                          parity=False)
                med[name].append(statistics.median(rec["step_time_s"][1:]))
    ours, native = min(med["pp-1f1b"]), min(med["pp-native-1f1b"])
    return {"ours_step_s": ours, "native_step_s": native, "ratio": ours / native,
            "target": 1.3, "ok": ours / native <= 1.3, "p": p, "m": 2 * p, "model": "gpt-tiny",
            "rounds": med}


@bench("pipeline", help="bubble measured vs theory (emulated), idle time and activation memory "
                        "per schedule, executor vs torch.distributed.pipelining (cpu)")
def bench_pipeline(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    p = getattr(args, "workers", None) or P
    ms = (4, 16) if quick else (4, 8, 16)
    specs = [{"schedule": s, "m": m} for m in ms for s in ("gpipe", "1f1b")]
    if M not in ms:
        specs += [{"schedule": "gpipe", "m": M}, {"schedule": "1f1b", "m": M}]
    specs += [{"schedule": "interleaved", "m": M, "v": 2}, {"schedule": "zb-h1", "m": M}]
    records = run_lab(specs, p=p, rows=ROWS, steps=2)
    by = {(r["theory"]["schedule"], r["theory"]["m"]): r for r in records}
    label = records[0]["profile"]

    # 1. bubble, emulated vs closed form (and vs the simulator fed the run's own action costs)
    bubble = {}
    print(f"bubble, emulated (virtual clock, {label}), square MLP, p={p}, m={M}:")
    print(f"  {'schedule':<14}{'emulated':>10}{'theory':>10}{'sim(costs)':>12}{'|diff|':>9}")
    for s in ("gpipe", "1f1b", "interleaved", "zb-h1"):
        r = by[(s, M)]
        got, want = r["bubble_fraction"], r["theory"]["bubble_fraction"]
        sim = predicted_from_costs(r)["bubble_fraction"]
        bubble[s] = {"emulated": got, "theory": want, "simulated_from_costs": sim,
                     "abs_diff": abs(got - want)}
        note = "  (theory assumes F=I=W)" if s == "zb-h1" else ""
        print(f"  {s:<14}{got:>10.4f}{want:>10.4f}{sim:>12.4f}{abs(got - want):>9.4f}{note}")
    ok_bubble = all(bubble[s]["abs_diff"] <= 0.02 for s in ("gpipe", "1f1b"))
    print(f"  gpipe, 1f1b within 0.02 of (p-1)/(m+p-1): {'ok' if ok_bubble else 'MISSED'}")

    # 2. idle time per rank against 1F1B
    idle = {s: by[(s, M)]["extra"]["0"]["idle_s"] for s in ("1f1b", "interleaved", "zb-h1")}
    base = sum(idle["1f1b"]) / p
    ratios = {s: (sum(idle[s]) / p) / base for s in ("interleaved", "zb-h1")}
    print(f"idle time per rank, emulated (µs): 1f1b {[round(x * 1e6, 3) for x in idle['1f1b']]}")
    for s, target in (("interleaved", 0.55), ("zb-h1", 0.5)):
        print(f"  {s:<12} {[round(x * 1e6, 3) for x in idle[s]]}  = {ratios[s]:.3f}x 1f1b "
              f"(target <= {target}: {'ok' if ratios[s] <= target else 'MISSED'})")

    # 3. activation memory in flight, per rank, as m grows (micro-batch size fixed)
    mem = {s: {m: [by[(s, m)]["extra"][str(k)]["activations_in_flight_peak"] for k in range(p)]
               for m in ms} for s in ("gpipe", "1f1b")}
    print(f"peak activation memory per rank, measured (ActivationMeter), KiB, {ROWS} rows per "
          f"micro-batch:")
    for s in ("gpipe", "1f1b"):
        for m in ms:
            print(f"  {s:<6} m={m:<3} {[round(b / 1024, 1) for b in mem[s][m]]}")
    g_growth = mem["gpipe"][ms[-1]][0] / mem["gpipe"][ms[0]][0]
    f_growth = mem["1f1b"][ms[-1]][0] / mem["1f1b"][ms[0]][0]
    print(f"  rank 0, m={ms[0]}->{ms[-1]}: gpipe x{g_growth:.2f} (linear: x{ms[-1] / ms[0]:g}), "
          f"1f1b x{f_growth:.2f} (flat: x1)")

    # 4. the executor against PyTorch's, measured on CPU workers
    over = _overhead(p, steps=5 if quick else 10, rounds=2 if quick else 3)
    print(f"executor overhead, measured (cpu, gloo, gpt-tiny, p={p}, m={2 * p}): pp-1f1b "
          f"{over['ours_step_s'] * 1e3:.1f} ms/step vs pp-native-1f1b "
          f"{over['native_step_s'] * 1e3:.1f} ms/step = {over['ratio']:.2f}x "
          f"(target <= 1.3: {'ok' if over['ok'] else 'MISSED'})")
    return {
        "setting": {"mode": "emulated", "profile": label, "p2p": "free (alpha=0, beta=inf)",
                    "model": records[0]["config"]["model"], "p": p, "m": M, "rows": ROWS},
        "bubble": bubble, "bubble_ok": ok_bubble,
        "idle_s": idle, "idle_ratio_vs_1f1b": ratios,
        "idle_ok": ratios["interleaved"] <= 0.55 and ratios["zb-h1"] <= 0.5,
        "activation_bytes": {s: {str(m): v for m, v in d.items()} for s, d in mem.items()},
        "activation_growth_rank0": {"gpipe": g_growth, "1f1b": f_growth},
        "overhead": over,
    }
