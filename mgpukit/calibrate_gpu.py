"""`mgpukit calibrate` on a GPU: measure this device, fit a profile, emulate eight of it.

The same micro-measurements the 2026-11-26 H200 reference holds (`data/reference/`), taken on
whatever device this process has, then fitted by the same code (`costmodel.fit`):

- **GEMMs by shape** — ``torch.matmul`` of GPT shapes in bf16 and fp32, back-to-back launches
  timed with device events (`gemm` rows);
- **attention by shape** — ``F.scaled_dot_product_attention`` (causal) forward and backward,
  bf16 and fp32: whichever kernel torch picks here (flash, cuDNN, memory-efficient);
- **copy bandwidth** — a device-to-device copy, bytes read + written per second;
- **host cost per op** — 2,000 chained ops on a tiny tensor: forward with autograd, its
  backward, in-place under no_grad;
- **one launch-bound training step** — the plain loop of gpt-tiny (`data/reference/realstep.py`'s
  method), the one step the profile's ``model_code_factor`` is fitted on (bisection against the
  emulated step, `measure.plainstep.fit_model_code_factor`).

The result is a TOML profile whose every figure says "measured here, <date>" (the links, which a
single device cannot measure, are the nearest shipped profile's, cited). Device-agnostic: on a
CPU the same functions run with wall-clock timing (that is how the tests exercise this path); a
GPU run is what the profile is for. `real_vs_emulated` is `mgpukit bench emulation --real`.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mgpukit.costmodel.fit import fit_reference
from mgpukit.costmodel.hardware import (AttentionModel, GemmModel, PeakFlops, load_profile, profile_toml,
                                       user_profile_dir)
from mgpukit.files import write_text
from mgpukit.measure.plainstep import emulate_plain_steps, fit_model_code_factor, model_config
from mgpukit.models import GPT, lm_loss

GEMM_SHAPES = ((8192, 2304, 768), (8192, 768, 3072), (8192, 3072, 768), (8192, 50304, 768), (8192, 6144, 2048),
               (8192, 2048, 8192), (512, 512, 512), (2048, 2048, 2048), (8192, 8192, 8192))
QUICK_GEMM_SHAPES = ((256, 256, 256), (512, 256, 128))
ATTENTION_SHAPES = ((8, 12, 1024, 64), (8, 16, 1024, 64), (4, 16, 2048, 128))  # (b, heads, seq, head dim)
QUICK_ATTENTION_SHAPES = ((2, 2, 64, 16),)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# datasheet dense peaks (FLOP/s) by device name; elsewhere the best measured rate stands in
DATASHEETS = {"H200": {"bf16": 989.5e12, "fp32": 67e12}, "H100": {"bf16": 989.5e12, "fp32": 67e12},
              "A100": {"bf16": 312e12, "fp32": 19.5e12}}


class _Timer:
    """Device events on CUDA (what the kernels took), wall clock with a sync elsewhere."""
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn, repeats: int) -> float:
        """Seconds per call of `fn`, `repeats` calls back to back after 3 warm-ups."""
        for _ in range(3):
            fn()
        self.sync()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                fn()
            end.record()
            self.sync()
            return start.elapsed_time(end) / 1e3 / repeats
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t) / repeats


def measure_gemms(device, shapes=GEMM_SHAPES, *, repeats: int = 10) -> list[dict]:
    """``(m × k)·(k × n)`` products in bf16 and fp32: rows ``m, n, k, dtype, s, tflops``."""
    device = torch.device(device)
    timer, rows = _Timer(device), []
    for name, dt in DTYPES.items():
        for m, n, k in shapes:
            a = torch.randn(m, k, device=device, dtype=dt)
            b = torch.randn(k, n, device=device, dtype=dt)
            s = timer.time(lambda: a @ b, repeats)
            rows.append({"m": m, "n": n, "k": k, "dtype": str(dt).split(".")[-1], "s": s,
                         "tflops": 2 * m * n * k / s / 1e12})
    return rows


def measure_attention(device, shapes=ATTENTION_SHAPES, *, repeats: int = 10) -> list[dict]:
    """Causal SDPA forward and backward by shape and dtype: rows ``b, h, s, d, dtype, causal,
    fwd_s, bwd_s`` (backward = forward + backward, minus forward)."""
    device = torch.device(device)
    timer, rows = _Timer(device), []
    for name, dt in DTYPES.items():
        for b, h, s, d in shapes:
            q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dt, requires_grad=True) for _ in range(3))
            grad = torch.randn(b, h, s, d, device=device, dtype=dt)

            def forward():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def both():
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

            fwd = timer.time(forward, repeats)
            rows.append({"b": b, "h": h, "s": s, "d": d, "dtype": str(dt).split(".")[-1], "causal": True,
                         "fwd_s": fwd, "bwd_s": max(timer.time(both, repeats) - fwd, 1e-9)})
    return rows


def measure_copy(device, *, numel: int = 2**28, repeats: int = 10) -> float:
    """Bytes read + written per second by a device-to-device copy of `numel` fp32."""
    device = torch.device(device)
    x = torch.empty(numel, device=device)
    y = torch.empty_like(x)
    return 2 * 4 * numel / _Timer(device).time(lambda: y.copy_(x), repeats)


def measure_host_per_op(device, *, n: int = 2000) -> dict:
    """Host µs per eager op (`data/reference/realstep.py`'s ``per_op``): 2,000 chained ops on a
    64-element tensor with autograd recording, their backward, in-place under no_grad."""
    device = torch.device(device)
    sync = _Timer(device).sync
    x = torch.randn(64, device=device, requires_grad=True)
    sync()
    t = time.perf_counter()
    y = x
    for _ in range(n):
        y = y * 1.0001
    sync()
    fwd = (time.perf_counter() - t) / n
    t = time.perf_counter()
    y.sum().backward()
    sync()
    bwd = (time.perf_counter() - t) / n
    with torch.no_grad():
        z = x.detach().clone()
        sync()
        t = time.perf_counter()
        for _ in range(n):
            z.mul_(1.0001)
        sync()
        no_grad = (time.perf_counter() - t) / n
    return {"fwd_grad_us": 1e6 * fwd, "bwd_us": 1e6 * bwd, "no_grad_us": 1e6 * no_grad}


def measure_plain_steps(model: str, *, batch: int, dtype: str = "fp32", optimizer: str = "sgd", device="cuda",
                        steps: int = 10, warm: int = 3) -> dict:
    """The plain loop of `measure.plainstep` run for real on `device` (the reference's method):
    median and min step, the allocator's peak on CUDA."""
    device = torch.device(device)
    timer = _Timer(device)
    cfg = model_config(model)
    torch.manual_seed(0)
    net = GPT(cfg).to(device)
    opt = (torch.optim.SGD(net.parameters(), lr=0.1) if optimizer == "sgd"
           else torch.optim.AdamW(net.parameters(), lr=1e-4))
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len + 1)).to(device)
    inp, tgt = x[:, :-1], x[:, 1:]
    if timer.cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(warm + steps):
        timer.sync()
        t = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = lm_loss(net(inp), tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        timer.sync()
        times.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() if timer.cuda else None
    return {"median_ms": 1e3 * statistics.median(times[warm:]), "min_ms": 1e3 * min(times[warm:]),
            "peak_bytes": peak, "loss": float(loss.detach())}


def measure_device(device, *, quick: bool = False) -> dict:
    """Every micro-measurement and the launch-bound step, in the reference file's format."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {
        "device": name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
        "sms": torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1,
        "gemm": measure_gemms(device, QUICK_GEMM_SHAPES if quick else GEMM_SHAPES, repeats=3 if quick else 10),
        "attention": measure_attention(device, QUICK_ATTENTION_SHAPES if quick else ATTENTION_SHAPES,
                                       repeats=2 if quick else 10),
        "copy_bytes_per_s": [measure_copy(device, numel=2**20 if quick else 2**28, repeats=3 if quick else 10)],
        "host_per_op_us": [measure_host_per_op(device, n=200 if quick else 2000) for _ in range(3)],
        "plain_pytorch_steps": {"gpt-tiny b8 fp32 sgd": measure_plain_steps(
            "gpt-tiny", batch=8, device=device, steps=2 if quick else 10, warm=1 if quick else 3)},
    }


def peaks_for(measured: dict) -> dict[str, float]:
    """Dense peak FLOP/s: the datasheet's for a known device, else the best rate measured."""
    for key, peaks in DATASHEETS.items():
        if key in measured["device"]:
            return {**peaks, "fp16": peaks["bf16"]}
    best = {dt: max(r["tflops"] for r in measured["gemm"] if r["dtype"] == full) * 1e12
            for dt, full in (("bf16", "bfloat16"), ("fp32", "float32"))}
    return {**best, "fp16": best["bf16"]}


def profile_from_measurements(measured: dict, *, name: str = "this-gpu", base: str = "h100-nvlink",
                              fit_factor: bool = True):
    """A `HardwareProfile` from `measure_device`'s dict: the fit of `costmodel.fit` for the
    kernels and the host, ``model_code_factor`` by bisection on the measured gpt-tiny step, the
    links (which one device cannot measure) from `base`."""


    peaks = peaks_for(measured)
    sms = int(measured.get("sms", 1))
    fit = fit_reference(measured, peak=peaks, sms=sms)
    g = fit["gemm"]
    tiles = ((256, 128), (128, 128), (128, 64))
    gemm = GemmModel(efficiency=min(1.0, g["bf16"]["efficiency"]), sms=sms, tiles=tiles, k_half=g["bf16"]["k_half"],
                     latency=g["latency"], fp32=GemmModel(efficiency=min(1.0, g["fp32"]["efficiency"]), sms=sms,
                                                           tiles=tiles, k_half=g["fp32"]["k_half"], latency=g["latency"]))
    attention = None
    if "attention" in fit and {"bf16", "fp32"} <= set(fit["attention"]):
        a = fit["attention"]
        attention = AttentionModel(forward=a["bf16"]["forward"], backward=a["bf16"]["backward"],
                                   fp32_forward=a["fp32"]["forward"], fp32_backward=a["fp32"]["backward"])
    shipped = load_profile(base)
    profile = dataclasses.replace(
        shipped, name=name, description=f"measured by `mgpukit calibrate` on {measured['device']} ({measured['date']})",
        peak_flops=PeakFlops(fp32=peaks["fp32"], tf32=peaks["bf16"] / 2, bf16=peaks["bf16"], fp16=peaks["fp16"]),
        memory_bandwidth=fit["memory_bandwidth"], gemm=gemm, attention=attention or shipped.attention,
        op_overhead=fit["host"]["forward"], op_overhead_by_context=fit["host"], model_code_factor=1.0)
    if fit_factor and measured.get("plain_pytorch_steps"):
        factor = fit_model_code_factor(profile, reference=measured, row="gpt-tiny b8 fp32 sgd")
        profile = dataclasses.replace(profile, model_code_factor=factor)
    return profile, fit


def calibrate_device(device="cuda", *, quick: bool = False, out: str | Path | None = None,
                     name: str = "this-gpu", verbose: bool = True):
    """Measure `device`, fit, write the profile (default ``~/.cache/mgpukit/hardware/<name>.toml``,
    where `load_profile(name)` finds it) and the raw measurements beside it (``.json``)."""


    measured = measure_device(device, quick=quick)
    profile, fit = profile_from_measurements(measured, name=name)
    path = Path(out) if out is not None else user_profile_dir() / f"{name}.toml"
    write_text(path.with_suffix(".json"), json.dumps(measured, indent=1))
    when = f"measured on {measured['device']}, {measured['date']}, torch {measured['torch']}"
    write_text(path, profile_toml(profile, comment=(
        f"Written by `mgpukit calibrate` ({when}); the measurements are in {path.with_suffix('.json').name}.\n"
        f"[gemm], [gemm.fp32]: {when}: GEMMs by shape, fitted by mgpukit.costmodel.fit "
        f"(bf16 rms {fit['gemm']['bf16']['rms']:.1%}, fp32 rms {fit['gemm']['fp32']['rms']:.1%}).\n"
        f"[attention]: {when}: causal SDPA forward/backward by shape (whichever kernel torch picked).\n"
        f"memory_bandwidth: {when}: device copy. op_overhead_*: {when}: 2,000 chained ops.\n"
        f"model_code_factor: {when}: fitted on the plain gpt-tiny b8 fp32 SGD step.\n"
        f"peak_flops: the datasheet for a known device, else the best measured rate.\n"
        f"links, [launch], [memory]: copied from h100-nvlink (one device cannot measure them).")))
    if verbose:
        print(f"{name}: {measured['device']}; profile written to {path}")
        print(f"  GEMM bf16 efficiency {profile.gemm.efficiency:.3f}, fp32 {profile.gemm.fp32.efficiency:.3f}, "
              f"latency {profile.gemm.latency * 1e6:.1f} us; copy {profile.memory_bandwidth / 1e12:.2f} TB/s")
        print("  host per op: " + ", ".join(f"{c} {profile.dispatch_overhead(c) * 1e6:.2f} us" for c in fit["host"])
              + f"; model_code_factor {profile.model_code_factor:.2f}")
    return profile


REAL_CONFIGS = (("gpt-tiny", 8, "fp32", "sgd"), ("gpt-small", 8, "fp32", "sgd"), ("gpt-small", 8, "bf16", "adamw"),
                ("gpt2-124m", 8, "fp32", "sgd"), ("gpt2-124m", 8, "bf16", "adamw"))


def real_vs_emulated(profile, *, device="cuda", configs=REAL_CONFIGS, steps: int = 10) -> list[dict]:
    """Each configuration run for real on `device` (one GPU) and emulated on `profile`: step
    time and peak memory, and their ratios (`mgpukit bench emulation --real`)."""
    rows = []
    for model, batch, dtype, optimizer in configs:
        real = measure_plain_steps(model, batch=batch, dtype=dtype, optimizer=optimizer, device=device, steps=steps)
        emulated = emulate_plain_steps(model, batch=batch, dtype=dtype, optimizer=optimizer, profile=profile)
        rows.append({"config": f"{model} b{batch} {dtype} {optimizer}", "measured_s": real["median_ms"] / 1e3,
                     "emulated_s": emulated["step_s"], "time_ratio": emulated["step_s"] / (real["median_ms"] / 1e3),
                     "measured_peak": real["peak_bytes"], "emulated_peak": emulated["peak_bytes"],
                     "memory_ratio": (emulated["peak_bytes"] / real["peak_bytes"]) if real["peak_bytes"] else None})
    return rows
