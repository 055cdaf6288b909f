"""`mgpukit bench reference`: the GPU profiles held against the one real GPU we measured.

`data/reference/h200-2026-11-26.json` (copied from the project's shared GPU folder) holds an
H200's kernel micro-measurements and five plain-PyTorch training steps of the kit's GPT. This
benchmark keeps the two apart, as a fit should:

1. **fit** — the profile's free parameters from the micro-measurements alone
   (`costmodel.fit`: GEMMs by shape, the device copy, the host's cost per chained op), each
   beside the figure the shipped ``h200`` profile carries, plus the one figure a step had to
   give: ``model_code_factor`` (a model's op costs the host more than a chained op; only a
   launch-bound step shows how much), fitted on gpt-tiny b8 fp32 SGD by bisection.
2. **check** — every step configuration emulated (`measure.plainstep`: the same plain loop
   under the virtual clock and the allocator meter, shape mode) on ``h200``: step time and peak
   memory against the real median and the CUDA allocator's peak. Targets: 10% on both. The
   fitted row is marked; the other four are checks.
3. **h100-nvlink** — the same steps on the fitted H100 profile: it must come out no faster than
   the H200 and at most the datasheets' bandwidth ratio (4.8 / 3.35 = 1.43×) slower.
"""
from __future__ import annotations

import json
from pathlib import Path

from mgpukit.bench import bench
from mgpukit.costmodel.fit import fit_reference
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import allocator_peak
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.measure.plainstep import configurations, emulate_plain_steps, model_config
from mgpukit.measure.plainstep import fit_model_code_factor as plainstep_fit

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference" / "h200-2026-11-26.json"
FIT_ROW = "gpt-tiny b8 fp32 sgd"  # the one step a figure is fitted on (model_code_factor)
PEAK = {"bf16": 989.5e12, "fp16": 989.5e12, "fp32": 67e12}  # GH100 datasheet, dense
SMS = 132
TARGET = 0.10
BANDWIDTH_RATIO = 4.8 / 3.35  # H200 vs H100 SXM datasheets; the compute is the same


def load_reference(path: str | Path = REFERENCE) -> dict:
    return json.loads(Path(path).read_text())


def fit_parameters(reference: dict | None = None) -> dict:
    """The micro-measurement fit (`costmodel.fit.fit_reference`) for the GH100."""
    return fit_reference(reference or load_reference(), peak=PEAK, sms=SMS)


def fit_model_code_factor(profile="h200", *, reference: dict | None = None, row: str = FIT_ROW,
                          tolerance: float = 0.002) -> float:
    """`measure.plainstep.fit_model_code_factor` on the shipped reference by default."""
    return plainstep_fit(profile, reference=reference or load_reference(), row=row, tolerance=tolerance)


def check_rows(profile="h200", *, reference: dict | None = None) -> list[dict]:
    """Each reference step emulated on `profile` beside the measured one (module docstring)."""
    reference = reference or load_reference()
    rows = []
    for key, kwargs in configurations(reference):
        real = reference["plain_pytorch_steps"][key]
        emulated = emulate_plain_steps(profile=profile, **kwargs)
        time_ratio = emulated["step_s"] / (real["median_ms"] * 1e-3)
        memory_ratio = emulated["peak_bytes"] / real["peak_bytes"]
        predicted = predicted_peak(profile=profile, **kwargs)
        rows.append({"config": key, "role": "fit" if key == FIT_ROW else "check",
                     "measured_s": real["median_ms"] * 1e-3, "measured_min_s": real["min_ms"] * 1e-3,
                     "emulated_s": emulated["step_s"], "time_ratio": time_ratio,
                     "measured_peak": real["peak_bytes"], "emulated_peak": emulated["peak_bytes"],
                     "memory_ratio": memory_ratio, "split": emulated["split"],
                     "predicted_peak": predicted, "predicted_memory_ratio": predicted / real["peak_bytes"],
                     "within": abs(time_ratio - 1) <= TARGET and abs(memory_ratio - 1) <= TARGET})
    return rows


def predicted_peak(*, model: str, batch: int, dtype: str, optimizer: str, profile="h200") -> float:
    """The plain loop's peak by the closed form (`costmodel.memory.allocator_peak`): no gradient
    at the worst moment (``set_to_none=True``), SGD without momentum or AdamW, autocast in bf16."""
    shape = ModelShape.from_gpt_config(model_config(model))
    return allocator_peak(shape, Layout(micro_batch=batch, dtype=dtype), optimizer_states=0 if optimizer == "sgd" else 2,
                          grads_persist=False, autocast=dtype == "bf16",
                          workspace=load_profile(profile).blas_workspace)["peak"]


def _print_fit(fit: dict, profile) -> None:
    g = fit["gemm"]
    print(f"1. fit on the micro-measurements ({REFERENCE.name})")
    print(f"   GEMM latency {g['latency'] * 1e6:.1f} us (profile {profile.gemm.latency * 1e6:.1f}); "
          f"launch-bound rows (<= {g['floor'] * 1e6:.1f} us, the host's pace) bound the fit, not in it")
    for dt, table in (("bf16", profile.gemm), ("fp32", profile.gemm.fp32)):
        f = g[dt]
        print(f"   {dt}: efficiency {f['efficiency']:.3f} (profile {table.efficiency:.3f}), k_half {f['k_half']:.0f} "
              f"(profile {table.k_half:.0f}); rms {f['rms']:.1%}, worst {f['max']:.1%} over "
              f"{sum(not r['launch_bound'] for r in f['residuals'])} shapes")
    print(f"   memory bandwidth {fit['memory_bandwidth'] / 1e12:.2f} TB/s (profile {profile.memory_bandwidth / 1e12:.2f})")
    print("   host per op: " + ", ".join(f"{c} {v * 1e6:.2f} us (profile {profile.dispatch_overhead(c) * 1e6:.2f})"
                                      for c, v in fit["host"].items()))


def _print_rows(rows: list[dict], profile: str) -> None:
    head = (f"{'configuration':<25} {'role':<5} {'measured':>10} {'emulated':>10} {'ratio':>6}   "
            f"{'peak meas.':>10} {'emulated':>9} {'ratio':>6} {'predicted':>9} {'ratio':>6}  within 10%")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['config']:<25} {r['role']:<5} {r['measured_s'] * 1e3:8.2f}ms {r['emulated_s'] * 1e3:8.2f}ms "
              f"{r['time_ratio']:6.3f}   {r['measured_peak'] / 1e9:8.3f}GB {r['emulated_peak'] / 1e9:7.3f}GB "
              f"{r['memory_ratio']:6.3f} {r['predicted_peak'] / 1e9:7.3f}GB {r['predicted_memory_ratio']:6.3f}  "
              f"{'yes' if r['within'] else 'NO'}")


@bench("reference", help="the h200 / h100-nvlink profiles against the real H200 reference: fit, check (10%)")
def bench_reference(args=None) -> dict:

    quick = bool(getattr(args, "quick", False))
    reference = load_reference()
    h200 = load_profile("h200")
    fit = fit_parameters(reference)
    _print_fit(fit, h200)
    factor = None if quick else fit_model_code_factor(reference=reference)
    if factor is not None:
        print(f"   model_code_factor fitted on '{FIT_ROW}' (the one step-fitted figure): {factor:.3f} "
              f"(profile {h200.model_code_factor:.3f})")
    print("\n2. check: the reference's plain PyTorch steps, emulated on h200 (shape mode) vs measured")
    rows = check_rows("h200", reference=reference)
    _print_rows(rows, "h200")
    print("\n3. the fitted h100-nvlink against h200 (same compute; 4.8 / 3.35 = "
          f"{BANDWIDTH_RATIO:.2f}x the bandwidth): emulated h100 / h200")
    h100 = check_rows("h100-nvlink", reference=reference)
    ratios = []
    for a, b in zip(h100, rows):
        ratio = a["emulated_s"] / b["emulated_s"]
        ratios.append(ratio)
        print(f"   {a['config']:<25} {ratio:.3f}  {'ok' if 1 - 1e-9 <= ratio <= BANDWIDTH_RATIO else 'OUT OF RANGE'}")
    return {"fit": {k: v for k, v in fit.items() if k != "gemm"} | {"gemm": {
                "latency": fit["gemm"]["latency"],
                **{dt: {k: fit["gemm"][dt][k] for k in ("efficiency", "k_half", "rms", "max")} for dt in ("bf16", "fp32")}}},
            "model_code_factor": factor, "h200": rows, "h100_over_h200": ratios,
            "all_within": all(r["within"] for r in rows),
            "h100_in_range": all(1 - 1e-9 <= r <= BANDWIDTH_RATIO for r in ratios)}
