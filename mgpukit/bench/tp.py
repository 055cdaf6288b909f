"""`mgpukit bench tp`: the hand-written tensor parallelism timed against DTensor's, and the
link a tp group spans, emulated beside the analytic model.

Setting (say it with every figure):

- **measured** wall clock, CPU workers (gloo), ``gpt-tiny``, tp = 2: ``tp`` (Megatron-style
  layers, `mgpukit.strategies.tensor_parallel`) vs ``tp-native`` (DTensor
  ``parallelize_module`` + ``loss_parallel``, its CommObserver off), the same model, batch and
  split; median step time (first step skipped), best of 3 interleaved rounds (2 with --quick);
- **emulated** step time (virtual clock) of ``tp`` at tp = 8 on ``gpt-small`` (8 heads) with
  the tp group on NVLink (``h100-nvlink``) and on PCIe (``h100-nvlink``'s GPU with ``h100-pcie``'s link: the link alone changes); with --quick: tp = 4
  on ``gpt-tiny``. Beside it, the analytic model (`costmodel.step_time`) for the same layout,
  and — analytic only — the group split over InfiniBand (``h100-ib`` with one GPU per node,
  which no profile file describes).
"""
from __future__ import annotations

import statistics
import warnings

from mgpukit.bench import bench
from mgpukit.experiment import run
from mgpukit.studies.tp_links import PCIE, link_profile, predicted_tp_step
from mgpukit.runtime.launcher import OversubscribedWarning


def _median(rec) -> float:
    return statistics.median(rec["step_time_s"][1:])


def _overhead(steps: int, rounds: int) -> dict:
    med = {"tp": [], "tp-native": []}
    for _ in range(rounds):
        for name in med:
            opts = {"count_comm": False} if name == "tp-native" else {}
            rec = run(name, workers=2, mode="cpu", steps=steps, parity=False, options=opts)
            med[name].append(_median(rec))
    ours, native = min(med["tp"]), min(med["tp-native"])
    return {"ours_step_s": ours, "native_step_s": native, "ratio": ours / native, "target": 1.1,
            "ok": ours / native <= 1.1, "tp": 2, "model": "gpt-tiny", "rounds": med}


def _links(quick: bool) -> dict:
    model, tp = ("gpt-tiny", 4) if quick else ("gpt-small", 8)
    out = {"model": model, "tp": tp, "profiles": {}}
    for profile, link in (("h100-nvlink", "NVLink (h100-nvlink)"), ("h100-pcie", PCIE)):  # PCIe: the link alone
        rec = run("tp", workers=tp, mode="emulated", profile=link_profile(link), model=model, steps=3, parity=False)
        out["profiles"][profile] = {"emulated_s": _median(rec),
                                    "analytic_s": predicted_tp_step(model, tp, link)["total_s"]}
    ib = "InfiniBand across nodes (h100-ib, 1 GPU/node)"
    out["profiles"]["h100-ib"] = {"emulated_s": None, "analytic_s": predicted_tp_step(model, tp, ib)["total_s"]}
    nv, pcie = out["profiles"]["h100-nvlink"], out["profiles"]["h100-pcie"]
    out["pcie_over_nvlink"] = {"emulated": pcie["emulated_s"] / nv["emulated_s"],
                               "analytic": pcie["analytic_s"] / nv["analytic_s"]}
    return out


@bench("tp", help="tp vs DTensor tp-native step time (cpu), tp over NVLink / PCIe / IB "
                  "(emulated vs analytic)")
def bench_tp(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        over = _overhead(steps=5 if quick else 10, rounds=2 if quick else 3)
        links = _links(quick)
    print(f"step time, measured (cpu, gloo, gpt-tiny, tp=2): tp {over['ours_step_s'] * 1e3:.1f} ms "
          f"vs tp-native {over['native_step_s'] * 1e3:.1f} ms = {over['ratio']:.2f}x "
          f"(target <= 1.1: {'ok' if over['ok'] else 'MISSED'})")
    print(f"step time of tp={links['tp']} on {links['model']} (ms): emulated (virtual clock) vs "
          f"analytic (cost model)")
    for name, v in links["profiles"].items():
        emu = f"{v['emulated_s'] * 1e3:10.3f}" if v["emulated_s"] is not None else f"{'-':>10}"
        print(f"  {name:<28}{emu}{v['analytic_s'] * 1e3:10.3f}")
    r = links["pcie_over_nvlink"]
    print(f"  PCIe / NVLink: emulated {r['emulated']:.2f}x, analytic {r['analytic']:.2f}x")
    return {"overhead": over, "links": links}
