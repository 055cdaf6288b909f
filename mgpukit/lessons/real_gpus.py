"""Notebook 00: the emulated tiny-GPT step held against the two GPUs the kit has measured.

`data/reference/` keeps what one H200 and one H100 80GB HBM3 measured on 2026-11-26 (each file's
``*_note`` fields say how; the H100 file's ``device_note`` says the two ran on different hosts).
For each GPU, side by side with what the emulator gives for the same program on that GPU's profile:

- **the plain eager loop** of gpt-tiny (8 sequences, fp32, SGD; `data/reference/realstep.py`, no
  kit code in the loop) — `mgpukit.measure.plainstep` emulates exactly that loop, op for op;
- **the host's time per eager op** (an op recorded by autograd, a backward op, a no-grad op: the
  median of the file's readings of 2,000 chained ops) beside the profile's figures;
- on the H100, **the kit's own** ``ddp`` **at one worker** (``mgpukit run ddp --workers 1 --mode
  gpu``: notebook 00's 1-GPU run). The H200's figure of it was taken before the kit's trainer
  overhead was cut (issue 29) and would compare another program, so it is not shown.

A launch-bound step is the host's time, and the two GPUs sat behind different host CPUs: what
the files can confirm is the *kind* of step (milliseconds of launches for microseconds of
kernels), and how far a profile's host figures are from one host's.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from mgpukit.costmodel.hardware import OP_CONTEXTS, load_profile
from mgpukit.measure.plainstep import emulate_plain_steps

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference"
# file -> the shipped profile of that GPU
GPUS = {"h200-2026-11-26.json": "h200", "h100-2026-11-26.json": "h100-nvlink"}
ROW = "gpt-tiny b8 fp32 sgd"
# the file's reading -> the profile's op context
_HOST_KEYS = {"forward": "fwd_grad_us", "backward": "bwd_us", "no_grad": "no_grad_us"}


def _label(ref: dict) -> str:
    device = ref["device"].replace("NVIDIA ", "")
    return f"measured on an {device}, {ref['date']}"


def held_against_real_gpus(reference_dir: str | Path = REFERENCE_DIR) -> list[dict]:
    """One row per measured GPU (module docstring): ``gpu`` (its label: "measured on an
    H100 80GB HBM3, 2026-11-26"), ``profile``, ``plain_measured_s`` / ``plain_emulated_s`` (the plain
    loop's median step and the emulated one), ``host_measured_us`` / ``host_profile_us`` (by op
    context), and ``kit_measured_s`` (the kit's 1-worker ddp step; None where not comparable)."""
    rows = []
    for name, profile in GPUS.items():
        ref = json.loads((Path(reference_dir) / name).read_text())
        gpu = load_profile(profile)
        plain = ref["plain_pytorch_steps"][ROW]
        emulated = emulate_plain_steps("gpt-tiny", batch=8, dtype="fp32", optimizer="sgd", profile=profile)
        kit = (ref.get("kit_measured_1_gpu") or {}).get(ROW)
        rows.append({
            "gpu": _label(ref), "profile": profile,
            "plain_measured_s": plain["median_ms"] * 1e-3, "plain_emulated_s": emulated["step_s"],
            "host_measured_us": {c: statistics.median(r[k] for r in ref["host_per_op_us"])
                                 for c, k in _HOST_KEYS.items()},
            "host_profile_us": {c: gpu.dispatch_overhead(c) * 1e6 for c in OP_CONTEXTS},
            # the kit measured with today's trainer: only where the file says it ran `ddp` (H100)
            "kit_measured_s": kit["median_ms"] * 1e-3 if kit and kit.get("strategy") == "ddp" else None,
        })
    return rows


def h100_measured_step(model: str, global_batch: int, reference_dir: str | Path = REFERENCE_DIR) -> dict:
    """What the H100 measured for `model` at `global_batch` sequences, fp32 SGD, on one GPU:
    ``kit_s`` (the kit's ``ddp`` at one worker, `mgpukit.bench.gpu.real_scale`), ``plain_s``
    (the plain eager loop, or None) and ``gpu`` (the label). Notebook 01 prints it beside its
    emulated 1-GPU GPT-2 step."""
    ref = json.loads((Path(reference_dir) / "h100-2026-11-26.json").read_text())
    (kit,) = [r for r in ref["kit_real_scale"] if r["model"] == model and r["global_batch"] == global_batch
              and not r.get("layout")]  # the fp32 default, not the bf16 runs
    plain = ref["plain_pytorch_steps"].get(f"{model} b{global_batch} fp32 sgd")
    return {"gpu": _label(ref), "kit_s": kit["step"]["median_s"],
            "plain_s": plain["median_ms"] * 1e-3 if plain else None}


__all__ = ["held_against_real_gpus", "h100_measured_step", "GPUS", "ROW"]
