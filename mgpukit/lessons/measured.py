"""What one real H100 measured, beside what the kit's H100 profile predicts for the same kernels.

`data/reference/h100-2026-11-26.json` holds one session on one NVIDIA H100 80GB HBM3 (the lead's,
2026-11-26; the GPU the ``h100-nvlink`` profile describes, which was fitted on an H200's
micro-measurements, never on this card): GEMMs by shape in bf16 and fp32, the linear layers of
Llama 3 405B and 70B at tensor-parallel 8 (forward, input-gradient and weight-gradient shapes,
8,192 tokens), and causal attention at head dim 128, sequence 8K. Each figure there is a median
of CUDA-event timings (its ``*_note`` fields say how). The notebooks load it through these
functions and print it labelled :data:`LABEL` beside the profile's prediction of the *same*
kernel (`costmodel.kernels.gemm_seconds` / `attention_seconds`, the calls the planner makes) —
nothing here is typed into prose, and nothing is fitted to it.
"""
from __future__ import annotations

import json
from pathlib import Path

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.kernels import at_sustained_power, attention_seconds, gemm_seconds

H100_REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference" / "h100-2026-11-26.json"
LABEL = "measured on an H100 80GB HBM3, 2026-11-26, reference file (not a run made now)"
_DTYPE = {"bfloat16": "bf16", "float32": "fp32"}


def load_h100(path: str | Path = H100_REFERENCE) -> dict:
    """The reference file as a dict (its ``*_note`` fields describe each measurement)."""
    return json.loads(Path(path).read_text())


def _gemm_row(g: dict, dtype: str, profile) -> dict:
    flops = 2.0 * g["m"] * g["n"] * g["k"]
    pred = gemm_seconds(g["m"], g["n"], g["k"], profile, dtype=dtype)
    return {**{k: g[k] for k in ("m", "n", "k")}, "dtype": dtype, "measured_s": g["s"],
            "measured_tflops": flops / g["s"] / 1e12, "predicted_s": pred, "predicted_tflops": flops / pred / 1e12}


def gemm_rows(profile: str = "h100-nvlink", *, reference: dict | None = None) -> list[dict]:
    """Each GEMM timed by shape (``m × k`` times ``k × n``, bf16 and fp32): measured seconds and
    TFLOP/s beside the profile's prediction for the same shape."""
    ref, prof = reference or load_h100(), load_profile(profile)
    return [_gemm_row(g, _DTYPE[g["dtype"]], prof) for g in ref["gemm"]]


def bf16_speedup_rows(gemms: list[dict]) -> list[dict]:
    """`gemm_rows` paired by shape: bf16 and fp32 TFLOP/s, measured and predicted, and bf16's
    speed over fp32's, smallest GEMM first (notebook 07: size decides what 16 bits buy)."""
    by_shape: dict[tuple, dict] = {}
    for g in gemms:
        by_shape.setdefault((g["m"], g["n"], g["k"]), {})[g["dtype"]] = g
    rows = []
    for (m, n, k), d in sorted(by_shape.items(), key=lambda kv: kv[0][0] * kv[0][1] * kv[0][2]):
        b, f = d["bf16"], d["fp32"]
        rows.append({"shape": f"{m}×{k}·{k}×{n}", "flops": 2 * m * n * k,
                     "bf16": b["measured_tflops"], "bf16_predicted": b["predicted_tflops"],
                     "fp32": f["measured_tflops"], "fp32_predicted": f["predicted_tflops"],
                     "ratio": b["measured_tflops"] / f["measured_tflops"],
                     "ratio_predicted": b["predicted_tflops"] / f["predicted_tflops"]})
    return rows


def llama_tp8_layer(model: str, profile: str = "h100-nvlink", *, reference: dict | None = None) -> dict:
    """One transformer layer of Llama 3 ``model`` ("405b" or "70b") at tensor-parallel 8, one
    micro-batch of 8,192 tokens, bf16: its four linears' forward, input-gradient and
    weight-gradient GEMMs and its causal attention (forward + backward), each measured and
    predicted, summed. ``gemms`` keeps the twelve GEMM rows (``linear``, ``pass`` added).

    Predicted twice for the GEMMs: ``gemm_predicted_s`` at the profile's short-burst rate (what
    the emulator charges, and what the measurement — 20 launches each — is), and
    ``gemm_sustained_s`` under the profile's sustained-power ceiling (`at_sustained_power`: what
    the planner charges a step that runs GEMMs for seconds). Attention as the planner charges it."""
    ref, prof = reference or load_h100(), load_profile(profile)
    held = at_sustained_power(prof)
    gemms = [{**_gemm_row(g, "bf16", prof), "linear": g["linear"], "pass": g["pass"],
              "sustained_s": gemm_seconds(g["m"], g["n"], g["k"], held, dtype="bf16")}
             for g in ref["gemm_llama_tp8"] if g["model"] == model]
    if not gemms:
        raise ValueError(f"no tp-8 GEMMs for {model!r} in the reference; it has "
                         f"{sorted({g['model'] for g in ref['gemm_llama_tp8']})}")
    att = next(a for a in ref["attention_long"] if a["name"] == f"{model} tp8")
    bh = att["b"] * att["heads"]
    att_pred = (attention_seconds(bh, att["seq"], att["seq"], att["d"], held, dtype="bf16", causal=True)
                + attention_seconds(bh, att["seq"], att["seq"], att["d"], held, dtype="bf16", causal=True,
                                    backward=True))
    return {
        "model": model, "profile": profile, "gemms": gemms,
        "gemm_measured_s": sum(g["measured_s"] for g in gemms),
        "gemm_predicted_s": sum(g["predicted_s"] for g in gemms),
        "gemm_sustained_s": sum(g["sustained_s"] for g in gemms),
        "attention_measured_s": att["fwd_s"] + att["bwd_s"],
        "attention_predicted_s": att_pred,
        "heads": att["heads"], "seq": att["seq"], "head_dim": att["d"],
    }


def predicted_gemm(m: int, n: int, k: int, profile: str = "h100-nvlink", *, dtype: str = "bf16") -> float:
    """The profile's seconds for one ``(m × k)·(k × n)`` GEMM — what the emulator and the planner
    charge for it (`costmodel.kernels.gemm_seconds`), for shapes the reference did not time."""
    return gemm_seconds(m, n, k, load_profile(profile), dtype=dtype)
