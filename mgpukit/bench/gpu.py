"""`mgpukit bench gpu` (`make test-gpu`): the check to run whenever a GPU is at hand.

Under 8 minutes on one H100, in one process, on the GPUs present:

1. **every strategy** on as many GPUs as it uses (at most those present), parity on; a strategy
   that needs more GPUs than there are is one line, "skip NAME: why" (`--model gpt2-124m`:
   every strategy at real scale);
2. **the kit's overhead**: `bench overhead` — the kit's 1-worker step against a plain PyTorch
   loop, gpt-tiny and gpt-small, fp32 SGD and bf16 AdamW (target ≤ 1.10);
3. **real vs emulated at one GPU**: the plain loop's measured step against the `h100-nvlink`
   profile's emulated step of the same model, batch, dtype and optimizer (GPT-2 124M in shape
   mode), the ratio printed — what `shared/gpu/` measured on an H200 once, now in the repository;
4. **real scale for real**: GPT-2 124M with parity, GPT-2 1.3B in bf16, and the 7B shape
   refused by the memory check in one line with the change that would fit;
5. **the exported script**: `torchrun --nproc_per_node <GPUs> scripts/train.py --strategy all`
   exits 0, skipping what needs more workers.

`--mode cpu` rehearses the same code on CPU workers (`--quick`: a few strategies and cases),
which is how the unit tests keep it from rotting on a machine without a GPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

from mgpukit.bench import bench
from mgpukit.bench.overhead import measure_overhead
from mgpukit.experiment import prepare, run
from mgpukit.export import exportable
from mgpukit.studies.warm import warm_parent
from mgpukit.measure.spread import summarize
from mgpukit.runtime.hardware import cuda_device_count
from mgpukit.runtime.launcher import OversubscribedWarning
from mgpukit.strategies import get

QUICK_STRATEGIES = ("ddp", "dp-bucketed", "zero3", "pp-1f1b")
ROOT = Path(__file__).resolve().parents[2]


def _stamp(t0: float, what: str) -> None:
    print(f"== [{time.perf_counter() - t0:5.0f} s] {what}", flush=True)


def every_strategy(mode: str, devices: int, *, steps: int, names, model: str = "gpt-tiny") -> list[dict]:
    """Each strategy on min(its default workers, the devices), parity on, or why it was skipped
    (`model`: e.g. gpt2-124m, every strategy at real scale — after the memory check)."""
    rows = []
    for name in names:
        try:
            strat = get(name)
            workers = max(strat.min_workers, min(strat.default_workers, devices))
            if mode == "gpu" and workers > devices:
                raise ValueError(f"needs {workers} GPUs, {devices} present")
            prepare(name, workers=workers, mode=mode, steps=steps, model=model)
        except ValueError as e:
            rows.append({"strategy": name, "skipped": str(e).splitlines()[0]})
            print(f"  skip {name}: {rows[-1]['skipped']}", flush=True)
            continue
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OversubscribedWarning)
                rec = run(name, workers=workers, mode=mode, steps=steps, model=model, timeout_s=600)
            parity = rec["parity"]
            ok = parity is None or parity["ok"]
            row = {"strategy": name, "workers": workers, "ok": ok,
                   "parity": None if parity is None else parity.get("max_abs_diff"),
                   "step": rec["step_time"], "wall_s": time.perf_counter() - start}
        except Exception as e:  # noqa: BLE001 — a check reports every strategy, failures included
            row = {"strategy": name, "workers": workers, "ok": False,
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        rows.append(row)
        what = (f"parity {'ok' if row['ok'] else 'FAILED'} (max |Δ| {row['parity']:.1e}), step "
                f"{row['step']['median_s'] * 1e3:.2f} ms" if "error" not in row and row["parity"] is not None
                else row.get("error", "no reference"))
        print(f"  {name:<22} {workers} worker(s): {what}", flush=True)
    return rows


EMULATION_CASES = (  # (model, global batch, optimizer, dtype, shape mode for the emulated run)
    ("gpt-tiny", 8, "sgd", "fp32", False),
    ("gpt-small", 8, "sgd", "fp32", False),
    ("gpt-small", 8, "adamw", "bf16", False),
    ("gpt2-124m", 8, "sgd", "fp32", True),
    ("gpt2-124m", 8, "adamw", "bf16", True),
)


def device_vs_profile(mode: str, cases) -> list[dict]:
    """Plain-loop step measured on this device vs the h100-nvlink profile's emulated step."""
    rows = []
    for model, batch, optimizer, dtype, shape in cases:
        measured = measure_overhead(model=model, optimizer=optimizer, dtype=dtype, global_batch=batch,
                                    steps=8, repeats=1, strategies=("single",), mode=mode)
        real = measured["rows"]["single"]["plain"][0]["median_s"]
        emu = run("single", workers=1, mode="emulated", profile="h100-nvlink", model=model,
                  global_batch=batch, optimizer=optimizer, steps=2, layout={"dtype": dtype},
                  shape=shape, parity=False)
        emulated = summarize(emu["step_time_s"])["median_s"]
        rows.append({"model": model, "global_batch": batch, "optimizer": optimizer, "dtype": dtype,
                     "measured_plain_s": real, "measured_kit_s": measured["rows"]["single"]["kit"][0]["median_s"],
                     "emulated_s": emulated, "emulated_over_real": emulated / real})
        print(f"  {model:<10} b{batch} {dtype} {optimizer:<5}: real (plain loop) {real * 1e3:8.2f} ms, "
              f"emulated h100-nvlink {emulated * 1e3:8.2f} ms, emulated / real {emulated / real:.2f}", flush=True)
    return rows


def real_scale(mode: str, *, quick: bool) -> list[dict]:
    """GPT-2 124M with parity and GPT-2 1.3B in bf16 trained for real; the 7B refused in one line."""
    rows = []
    runs = ([] if quick else
            [dict(model="gpt2-124m", global_batch=8, steps=4),
             dict(model="gpt2-1.3b", global_batch=4, steps=3, layout={"dtype": "bf16"}, parity=False)])
    for kw in runs:
        try:
            rec = run("ddp", workers=1, mode=mode, timeout_s=600, **kw)
            rows.append({**kw, "ok": rec["parity"] is None or rec["parity"]["ok"],
                         "step": rec["step_time"], "peak_bytes": rec["memory"]["0"]["peak"],
                         "predicted_bytes": rec["memory_check"].get("predicted_bytes")})
            print(f"  {kw['model']}: step {rec['step_time']['median_s'] * 1e3:.1f} ms, peak "
                  f"{rows[-1]['peak_bytes'] / 1e9:.2f} GB (memory check predicted "
                  f"{(rows[-1]['predicted_bytes'] or 0) / 1e9:.2f} GB), parity "
                  f"{'n/a' if rec['parity'] is None else rec['parity']['ok']}", flush=True)
        except Exception as e:  # noqa: BLE001
            rows.append({**kw, "ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            print(f"  {kw['model']}: {rows[-1]['error']}", flush=True)
    cli = "import sys; from mgpukit.cli import main; sys.exit(main())"
    out = subprocess.run([sys.executable, "-c", cli, "run", "ddp", "--workers", "1", "--mode",
                          mode, "--model", "llama-7b", "--global-batch", "8", "--steps", "1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines = out.stderr.strip().splitlines()
    refused = out.returncode == 2 and len(lines) == 1 and "would fit with" in lines[0]
    rows.append({"model": "llama-7b", "refused_in_one_line": refused, "ok": refused,
                 "message": lines[-1] if lines else ""})
    print(f"  llama-7b: {'refused in one line' if refused else 'NOT refused as expected'}: "
          f"{rows[-1]['message'][:400]}", flush=True)
    return rows


def exported_script(devices: int, *, steps: int = 2) -> dict:
    """`torchrun --standalone --nproc_per_node N scripts/train.py --strategy all`: exit 0, skips."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           str(devices), "scripts/train.py", "--strategy", "all", "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    text = out.stdout + out.stderr
    skips = [line for line in text.splitlines() if line.startswith("skip ")]
    result = {"command": " ".join(cmd[2:]), "returncode": out.returncode, "skipped": skips,
              "traceback": "Traceback" in text, "ok": out.returncode == 0 and "Traceback" not in text}
    print(f"  torchrun --nproc_per_node {devices} scripts/train.py --strategy all: exit "
          f"{out.returncode}, {len(skips)} skipped, traceback: {result['traceback']}", flush=True)
    return result


@bench("gpu", help="the GPU check (make test-gpu): every strategy on the GPUs present with parity, "
                   "bench overhead, real vs emulated at one GPU, real-scale runs; --mode cpu rehearses it")
def bench_gpu(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    mode = getattr(args, "mode", None) or ("gpu" if cuda_device_count() else None)
    if mode is None:  # `bench all` on a machine without a GPU
        print("no GPU here: skipped (`mgpukit bench gpu --mode cpu --quick` rehearses it on CPU workers)")
        return {"skipped": True, "ok": True}
    devices = cuda_device_count() if mode == "gpu" else (getattr(args, "workers", None) or 1)
    if mode == "gpu" and devices == 0:
        raise ValueError("bench gpu found no GPU; rehearse it on CPU workers with --mode cpu.")
    warm_parent()
    t0 = time.perf_counter()
    _stamp(t0, f"bench gpu: mode {mode}, {devices} device(s), load average {os.getloadavg()[0]:.1f}")
    model = getattr(args, "model", None) or "gpt-tiny"
    _stamp(t0, f"1. every strategy on the devices present, parity on ({model})")
    names = QUICK_STRATEGIES if quick else exportable()
    result = {"mode": mode, "devices": devices, "model": model,
              "strategies": every_strategy(mode, devices, steps=2 if quick else 3, names=names, model=model)}
    _stamp(t0, "2. the kit's overhead over a plain PyTorch loop (target <= 1.10)")
    cases = ([("gpt-tiny", "sgd", "fp32")] if quick else
             [("gpt-tiny", "sgd", "fp32"), ("gpt-small", "sgd", "fp32"), ("gpt-small", "adamw", "bf16")])
    result["overhead"] = []
    for model, optimizer, dtype in cases:
        o = measure_overhead(model=model, optimizer=optimizer, dtype=dtype, steps=6 if quick else 20,
                             repeats=1 if quick else 3, mode=mode)
        result["overhead"].append(o)
        print(f"  {model:<9} {optimizer:<5} {dtype}: kit single / plain {o['rows']['single']['ratio']:.2f}, "
              f"kit ddp / plain {o['rows']['ddp']['ratio']:.2f}", flush=True)
    _stamp(t0, "3. real vs emulated (h100-nvlink) at one device")
    result["emulation"] = device_vs_profile(mode, EMULATION_CASES[:1] if quick else EMULATION_CASES)
    _stamp(t0, "4. real-scale models for real, after the memory check")
    result["real_scale"] = real_scale(mode, quick=quick)
    if not quick:
        _stamp(t0, "5. the exported script, every strategy")
        result["script"] = exported_script(devices)
    result["seconds"] = time.perf_counter() - t0
    failed = [r["strategy"] for r in result["strategies"] if r.get("ok") is False]
    result["ok"] = (not failed and all(r.get("ok", True) for r in result["real_scale"])
                    and result.get("script", {"ok": True})["ok"])
    _stamp(t0, f"done: {'ok' if result['ok'] else 'FAILED: ' + ', '.join(failed)}")
    return result
