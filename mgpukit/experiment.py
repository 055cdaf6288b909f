"""`run(strategy, ...)`: launch a registered strategy, build its result record, check parity.

This is the one entry point the CLI, the notebooks, the tour and the benchmarks share:

    rec = mgpukit.run("ddp", workers=2, steps=20)
    rec["parity"]["ok"], rec["tokens_per_s"], rec["timeline"][:3]

Parity: the strategy's logged losses and gradient norms (per step) and its final weights are
compared with the `single` reference trained on the same global batches, at torch's default
fp32 tolerances (`torch.testing.assert_close`: rtol 1.3e-6, atol 1e-5). The gradient norm is
what catches a missing average: Adam's update barely changes if every gradient is doubled,
but the norm does.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from mgpukit.config import RunConfig
from mgpukit.measure.record import build_record, save_chrome_trace, save_record
from mgpukit.measure.recorder import Recorder
from mgpukit.runtime.hardware import env_info
from mgpukit.runtime.launcher import launch, resolve_mode
from mgpukit.strategies import registry

FP32_TOL = {"rtol": 1.3e-6, "atol": 1e-5}  # torch.testing.assert_close defaults for float32
_REFERENCE_CACHE: dict[str, dict] = {}


def run(strategy: str, *, workers: int | None = None, mode: str = "auto", profile: str | None = None,
        config: RunConfig | None = None, parity: bool = True, tolerance: dict | None = None,
        timeout_s: float = 600.0, json_path: str | Path | None = None,
        trace_path: str | Path | None = None, torch_profile_dir: str | Path | None = None,
        echo: bool = False, threads_per_worker: int | None = None,
        weights_path: str | Path | None = None, **overrides) -> dict:
    """Run `strategy` on `workers` ranks and return its result record.

    mode: "auto" | "cpu" | "gpu" | "emulated" (with `profile`, e.g. "h100-nvlink").
    config: a RunConfig; keyword `overrides` (steps=..., global_batch=..., options=...) replace
    its fields. `threads_per_worker` pins intra-op threads (default: cores // workers).
    `weights_path` saves the trained (unsharded) weights as safetensors; `json_path` writes the record, `trace_path` a Chrome/Perfetto trace of its
    timeline, `torch_profile_dir` a torch.profiler trace per rank (the kernel-level view).
    """
    strat = registry.get(strategy)
    cfg = (config or RunConfig()).replace(**overrides) if overrides else (config or RunConfig())
    if cfg.model not in strat.models:
        raise ValueError(f"strategy {strategy!r} runs on models {strat.models}, not {cfg.model!r}.")
    workers = workers or strat.default_workers
    if workers < strat.min_workers:
        raise ValueError(f"strategy {strategy!r} needs at least {strat.min_workers} workers, got {workers}.")
    dims = strat.dims(workers)  # raises with what to change when the degrees don't fit
    check_batch(cfg, strat.batch_ranks(workers) if strat.batch_ranks else dims.dp)
    if strat.validate:
        strat.validate(cfg, dims)
    if mode == "emulated" and not strat.emulation:
        raise ValueError(f"strategy {strategy!r} has no emulated mode; use mode='cpu'.")
    mode = resolve_mode(mode, workers)
    if mode == "emulated" and not profile:
        raise ValueError("mode='emulated' needs a hardware profile, e.g. profile='h100-nvlink'.")
    if mode == "emulated":
        from mgpukit.costmodel.hardware import load_profile

        load_profile(profile)  # an unknown profile fails here, naming the known ones
    results = launch(_worker, workers, strat.name, cfg, mode=mode, profile=profile,
                     timeout_s=timeout_s, echo=echo, threads_per_worker=threads_per_worker,
                     options={"torch_profile_dir": str(torch_profile_dir) if torch_profile_dir else None})
    ranks = [r["result"] for r in results]
    weights = results[0].get("weights")
    record = build_record(
        strategy=strat.name, mode=mode, profile=profile if mode == "emulated" else None,
        dims=dims.as_dict(), config=cfg.as_dict(), ranks=ranks,
        tokens_per_step=cfg.tokens_per_step(), env=env_info(),
        theory=strat.theory(cfg, dims) if strat.theory else None,
    )
    if parity and strat.reference:
        ref = reference(strat.reference, cfg, timeout_s=timeout_s)
        check = strat.compare or compare
        record["parity"] = check(record, weights, ref, tolerance or strat.tolerance or FP32_TOL)
    if strat.reference is None:
        _REFERENCE_CACHE.setdefault(_ref_key(strat.name, cfg), {"record": record, "weights": weights})
    if json_path:
        save_record(record, json_path)
    if weights_path:
        save_weights(weights, weights_path)
    if trace_path:
        save_chrome_trace(record, trace_path)
    return record


def save_weights(weights: dict | None, path: str | Path) -> Path:
    """The trained, unsharded weights as safetensors (no pickle: safe to load anywhere)."""
    from safetensors.torch import save_file

    if weights is None:
        raise ValueError("this strategy returned no weights to save.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(path))
    return path


def load_weights(path: str | Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def check_batch(cfg: RunConfig, ranks: int) -> None:
    """Every rank that takes a slice of the batch gets the same number of whole micro-batches."""
    per = ranks * cfg.micro_batches
    if cfg.global_batch % per:
        good = per * max(1, round(cfg.global_batch / per))
        raise ValueError(
            f"global_batch={cfg.global_batch} does not split into {ranks} data ranks × "
            f"micro_batches={cfg.micro_batches}; use a global batch that is a multiple of {per} "
            f"(e.g. {good}), or change the number of workers or micro-batches.")


def _ref_key(name: str, cfg: RunConfig) -> str:
    return f"{name}|{cfg.replace(options={}).key()}"


def reference(name: str, cfg: RunConfig, *, timeout_s: float = 600.0) -> dict:
    """The reference run for `cfg` (cached per process: the tour compares many strategies to one)."""
    key = _ref_key(name, cfg)
    if key not in _REFERENCE_CACHE:
        run(name, workers=1, mode="cpu", config=cfg.replace(options={}), parity=False,
            timeout_s=timeout_s)
    return _REFERENCE_CACHE[key]


def compare(record: dict, weights: dict | None, ref: dict, tol: dict) -> dict:
    """Losses, gradient norms and final weights against the reference, elementwise with tolerance."""
    ref_record, ref_weights = ref["record"], ref["weights"]
    checks = {
        "losses": (record["losses"], ref_record["losses"]),
        "grad_norms": (record["grad_norms"], ref_record["grad_norms"]),
    }
    out = {"reference": ref_record["strategy"], "tolerance": dict(tol)}
    ok = True
    worst = 0.0
    for name, (got, want) in checks.items():
        got_t, want_t = torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
        if got_t.shape != want_t.shape:
            out[f"{name}_max_abs_diff"] = math.inf
            ok = False
            continue
        diff = (got_t - want_t).abs()
        out[f"{name}_max_abs_diff"] = float(diff.max()) if diff.numel() else 0.0
        ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want_t.abs()))
        worst = max(worst, out[f"{name}_max_abs_diff"])
    if weights is None:
        out["weights_max_abs_diff"] = None
        out["weights_checked"] = False
    else:
        missing = sorted(set(ref_weights) ^ set(weights))
        if missing:
            raise ValueError(f"weights returned by the strategy don't match the reference's names: {missing[:5]}")
        wdiff = 0.0
        for k, want in ref_weights.items():
            got = weights[k].to(want.dtype)
            diff = (got - want).abs()
            wdiff = max(wdiff, float(diff.max()) if diff.numel() else 0.0)
            ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want.abs()))
        out["weights_max_abs_diff"] = wdiff
        out["weights_checked"] = True
        worst = max(worst, wdiff)
    out["max_abs_diff"] = worst
    out["ok"] = bool(ok)
    return out


def _worker(name: str, cfg: RunConfig):
    """Runs on every rank: the strategy with a recorder; optional torch.profiler trace."""
    from mgpukit.runtime.context import current

    ctx = current()
    if ctx.options.get("device_guard"):  # factory calls without device= become meta tensors
        from mgpukit.measure.device_guard import DeviceGuard

        with DeviceGuard():
            return _run_strategy(ctx, name, cfg)
    return _run_strategy(ctx, name, cfg)


def _run_strategy(ctx, name: str, cfg: RunConfig):
    torch.manual_seed(cfg.seed)
    rec = Recorder(ctx)
    strat = registry.get(name)
    prof_dir = ctx.options.get("torch_profile_dir")
    if prof_dir:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            out = strat.run(ctx, rec, cfg) or {}
        Path(prof_dir).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(prof_dir) / f"{name}-rank{ctx.rank}.json"))
    else:
        out = strat.run(ctx, rec, cfg) or {}
    return {"result": rec.result(), "weights": out.get("weights")}
