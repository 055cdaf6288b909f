"""`mgpukit bench overhead`: what the kit's own step costs over a plain PyTorch loop.

Every measured speedup, overlap and bubble inherits the harness's overhead, so it is measured
here and held to a target: the kit's 1-worker step ≤ 1.10× a plain PyTorch loop of the same
model, optimizer, dtype and batches, on the same device (the GPU when there is one, else the
CPU).

Method: one worker is launched (the GPU, or a CPU worker with its usual threads), and inside
it the two loops alternate — plain, kit, plain, kit … `repeats` times, after one pair that is
not counted (warm-up) — so they share the process, the threads, the device and the machine's
load of the moment. Each block trains `steps` steps from the same seeded weights on the same
batches; its figure is the median of its steady steps (`measure.spread`, step 0 left out), and
the ratio is the median over the pairs (also shown: the fastest kit block over the fastest
plain block — load only ever slows a block down, so on a busy machine it is the steadier one).

- **plain**: `model(x)` → `lm_loss` → `backward()` → `opt.step()` → `opt.zero_grad()`, the
  optimizer built with torch's defaults, timed with `perf_counter` (and a device synchronise at
  the step's end on a GPU) — what a user would write.
- **kit `single`**: the kit's trainer on one rank (recorder, timeline, activation meter,
  gradient norm and finiteness check, memory by category): the kit's own overhead.
- **kit `ddp`**: the same through Accelerate's DDP on a group of one — what `mgpukit run ddp
  --workers 1` measures; DDP's bucket copies and its (one-rank) all-reduce are torch's cost,
  not the kit's, so it is shown beside the target, not held to it.

`plain_threads=1` times the plain loop on one intra-op thread while the kit keeps its own — the
check of issue 29 against "a plain 1-thread loop beside it" with a core kept busy (`--busy`).
"""
from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time

import torch

from mgpukit.bench import bench
from mgpukit.config import RunConfig
from mgpukit.data import get_batch, load_tokens
from mgpukit.costmodel.hardware import THIS_MACHINE, load_profile
from mgpukit.costmodel.shapes import ModelShape, param_count
from mgpukit.experiment import prepare, run_rank
from mgpukit.fits import check_fits
from mgpukit.studies.warm import warm_parent
from mgpukit.measure.spread import summarize
from mgpukit.models.gpt import lm_loss
from mgpukit.runtime.hardware import cuda_device_count
from mgpukit.runtime.launcher import launch
from mgpukit.training.building import build_model

TARGET = 1.10


def plain_steps(cfg: RunConfig, device: torch.device, steps: int, *, dtype: str = "fp32",
                losses: list | None = None) -> list[float]:
    """Seconds per step of a plain PyTorch loop: same model, weights, batches and optimizer
    (each step's loss appended to `losses` when given: the kit's must be the same)."""
    model = build_model(cfg).to(device)
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    tokens = load_tokens()
    seq = cfg.model_config().seq_len
    cuda = device.type == "cuda"
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16"
                else contextlib.nullcontext())
    times = []
    for step in range(steps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        x, y = get_batch(tokens, step=step, global_batch=cfg.global_batch, seq_len=seq, rank=0,
                         world_size=1, seed=cfg.seed)
        x, y = x.to(device), y.to(device)
        with autocast:
            loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if losses is not None:
            losses.append(float(loss))
    return times


def _pairs(ctx, strategies, cfgs: dict, steps: int, repeats: int, plain_threads: int | None) -> dict:
    """Runs in the one worker: plain and kit blocks alternated `repeats` times."""
    threads = torch.get_num_threads()
    out = {"plain": [], "threads": threads, "plain_threads": plain_threads or threads,
           "losses": {}, **{name: [] for name in strategies}}
    for repeat in range(repeats + 1):  # the first pair warms the process up (allocator, caches)
        for name in strategies:
            if plain_threads:
                torch.set_num_threads(plain_threads)
            losses = []
            plain = plain_steps(cfgs[name], ctx.device, steps, dtype=cfgs[name].layout.dtype,
                                losses=losses)
            torch.set_num_threads(threads)
            kit = run_rank(ctx, name, cfgs[name])["result"]
            out["losses"][name] = {"plain": losses, "kit": kit["losses"]}  # the same training?
            if repeat:
                out["plain"].append(plain)
                out[name].append(kit["step_time_s"])
    return out


LAUNCH_LIMIT_S = 1800.0  # the one launch's timeout_s below


def check_time(cfgs: dict, steps: int, repeats: int, mode: str) -> None:
    """ValueError when the blocks cannot finish inside the launch's limit on CPU: every block
    trains `steps` steps, plain and kit, for each strategy, `repeats` + 1 times. A step costs at
    least 6·Ψ·tokens FLOPs (forward 2, backward 4; Kaplan et al. 2020) at this machine's fp32
    rate (`this-machine` profile: calibrated, or its placeholder) — GPT-2 1.3B at batch 8 × 1,024
    is ~6e13 FLOPs, minutes a step on CPU cores. GPUs are not checked (seconds a step at most)."""
    if mode == "gpu":
        return
    rate = load_profile(THIS_MACHINE).flops("fp32")
    blocks = 2 * (repeats + 1) * len(cfgs)
    seconds = 0.0
    for cfg in cfgs.values():
        if not cfg.is_gpt:
            continue
        params = param_count(ModelShape.from_gpt_config(cfg.model_config()))
        seconds += 2 * (repeats + 1) * steps * 6 * params * cfg.tokens_per_step() / rate
    if seconds > LAUNCH_LIMIT_S:
        model = next(iter(cfgs.values())).model
        raise ValueError(f"bench overhead would train {blocks} blocks of {steps} steps of {model} on CPU: "
                         f"at least {seconds:,.0f} s at this machine's {rate / 1e9:.0f} GFLOP/s (6·params·tokens "
                         f"a step; profile {THIS_MACHINE}), past its {LAUNCH_LIMIT_S:.0f} s limit; use a GPU, "
                         f"or a smaller --model (gpt-tiny, gpt-small).")


def measure_overhead(*, model: str = "gpt-tiny", optimizer: str = "sgd", dtype: str = "fp32",
                     global_batch: int = 8, steps: int = 20, repeats: int = 3,
                     strategies=("single", "ddp"), plain_threads: int | None = None,
                     mode: str | None = None) -> dict:
    """Kit / plain step-time ratios for each strategy on one worker (module docstring)."""
    mode = mode or ("gpu" if cuda_device_count() >= 1 else "cpu")
    cfgs = {name: prepare(name, workers=1, mode=mode, model=model, optimizer=optimizer,
                          global_batch=global_batch, steps=steps, layout={"dtype": dtype}).cfg
            for name in strategies}
    layouts = {cfg.layout for cfg in cfgs.values()}
    assert len(layouts) == 1, layouts  # one worker: the same layout for every strategy compared
    for name, cfg in cfgs.items():  # refused now, not OOM-killed or timed out after minutes
        check_fits(cfg, cfg.layout, workers=1, mode=mode, strategy=name, parity=False)
    check_time(cfgs, steps, repeats, mode)
    raw = launch(_pairs, 1, tuple(strategies), cfgs, steps, repeats, plain_threads, mode=mode,
                 layout=layouts.pop(), echo=False, timeout_s=LAUNCH_LIMIT_S, takes_context=True)[0]
    plain = [summarize(t) for t in raw["plain"]]  # one per (repeat, strategy), in order
    rows = {}
    for i, name in enumerate(strategies):
        mine = [summarize(t) for t in raw[name]]
        theirs = plain[i::len(strategies)]
        ratios = [k["median_s"] / p["median_s"] for k, p in zip(mine, theirs)]
        fastest = min(k["median_s"] for k in mine) / min(p["median_s"] for p in theirs)
        rows[name] = {"kit": mine, "plain": theirs, "ratios": ratios, "ratio": statistics.median(ratios),
                      "ratio_of_fastest": fastest, "held_to_target": name == "single",
                      "losses": raw["losses"][name]}
    return {"model": model, "optimizer": optimizer, "dtype": dtype, "global_batch": global_batch,
            "steps": steps, "repeats": repeats, "mode": mode, "threads": raw["threads"],
            "plain_threads": raw["plain_threads"], "target": TARGET, "rows": rows,
            "load_average": os.getloadavg(), "ok": rows.get("single", {"ratio": 0})["ratio"] <= TARGET}


@contextlib.contextmanager
def busy_core():
    """Another process keeping one core busy for as long as the block runs (a browser, a second
    notebook): `python -c 'while True: pass'`, ended when the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _fmt(s: dict) -> str:
    return f"{s['median_s'] * 1e3:7.2f} ms ±{50 * s['spread']:3.0f}%"


def _print(result: dict) -> None:
    where = "GPU" if result["mode"] == "gpu" else f"CPU, {result['threads']} intra-op threads"
    plain_t = (f", plain loop on {result['plain_threads']} thread(s)"
               if result["plain_threads"] != result["threads"] else "")
    load = ", ".join(f"{x:.1f}" for x in result["load_average"])
    print(f"measured on one worker ({where}{plain_t}), {result['model']} batch "
          f"{result['global_batch']}, {result['optimizer']}, {result['dtype']}; {result['repeats']} "
          f"alternating pairs of {result['steps']} steps; load average {load}")
    for name, row in result["rows"].items():
        pairs = "  ".join(f"{_fmt(k)} / {_fmt(p)}" for k, p in zip(row["kit"], row["plain"]))
        verdict = (f"target <= {TARGET:.2f}: {'ok' if row['ratio'] <= TARGET else 'MISSED'}"
                   if row["held_to_target"] else "(DDP's own cost included; not held to the target)")
        print(f"  kit {name:<6} / plain  {row['ratio']:.2f}  {verdict}  (fastest blocks: "
              f"{row['ratio_of_fastest']:.2f})")
        print(f"      kit / plain per pair: {pairs}")


@bench("overhead", help="the kit's 1-worker step vs a plain PyTorch loop of the same model, "
                        "optimizer and dtype, on the device present (target <= 1.10)")
def bench_overhead(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (2 if quick else 5)
    steps = getattr(args, "steps", None) or (6 if quick else 12)
    model = getattr(args, "model", None) or "gpt-tiny"
    warm_parent()
    cases = [("sgd", "fp32"), ("adamw", "fp32")]
    if cuda_device_count() >= 1 and not quick:
        cases.append(("adamw", "bf16"))
    results = []
    with busy_core() if getattr(args, "busy", False) else contextlib.nullcontext():
        for optimizer, dtype in cases[:1] if quick else cases:
            result = measure_overhead(model=model, optimizer=optimizer, dtype=dtype, steps=steps,
                                      repeats=repeats, mode=getattr(args, "mode", None),
                                      plain_threads=1 if getattr(args, "busy", False) else None)
            _print(result)
            results.append(result)
    return {"cases": results, "ok": all(r["ok"] for r in results)}
