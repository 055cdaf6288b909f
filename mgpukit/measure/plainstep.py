"""A plain PyTorch training loop on the virtual clock: the program the GPU reference measured.

`data/reference/h200-2026-11-26.json` holds real steps of the kit's GPT in plain eager PyTorch
on one H200 (`data/reference/realstep.py`: no kit code in the loop). To hold a profile against
them the emulator must run *that* program, op for op, not the kit's trainer (which adds its own
logging, casts and optimizer flavour):

    with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
        loss = lm_loss(model(inp), tgt)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

with SGD (lr 0.1, no momentum) or AdamW — on a GPU both default to their ``foreach``
implementation (`torch.optim.Optimizer` picks it for CUDA tensors), so it is chosen here
explicitly: the emulated ranks hold CPU tensors, for which torch would pick the per-tensor loop.
Likewise autocast runs with CUDA's rule for the loss, not the CPU's (`measure.gpu_autocast`).

The step runs under fake tensors (`measure.shape`: exact shapes, no data), under the virtual
clock (`measure.vclock`: host dispatch by op context, kernels by shape, the host running ahead
of the device) and under the allocator meter (`measure.allocator`: the caching allocator's
high-water mark). As the reference does, each step starts and ends with a device sync, and the
peak is counted from after the model, the optimizer and the batch exist.
"""
from __future__ import annotations

import dataclasses
import statistics

import torch

from mgpukit.config import GPT_MODELS, RunConfig
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.allocator import AllocatorMeter
from mgpukit.measure.gpu_autocast import gpu_autocast
from mgpukit.measure.shape import fake_mode
from mgpukit.measure.vclock import VirtualClock
from mgpukit.models import GPT, lm_loss


def model_config(name: str):
    """The `GPTConfig` of a GPT named as the CLI names it (`config.GPT_MODELS`, the one list)."""
    if name not in GPT_MODELS:
        raise ValueError(f"model={name!r}: choose one of {', '.join(GPT_MODELS)}")
    return RunConfig(model=name).model_config()


def emulate_plain_steps(model: str, *, batch: int, dtype: str = "fp32", optimizer: str = "sgd",
                        profile="h200", steps: int = 3, kernels_only: bool = False) -> dict:
    """Emulate `steps` steps of the plain loop (module docstring) of `model` at `batch`
    sequences on one GPU of `profile`. Returns ``step_s`` (median of the steps after the first,
    which creates the optimizer's state), ``steps_s``, ``peak_bytes`` (allocator high-water mark
    over all steps, as `max_memory_allocated` after `reset_peak_memory_stats`), the clock's
    ``split`` of the last step (``kernel``, ``launch_wait``, ``wait``, ``host`` seconds) and
    ``label`` ("emulated")."""
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype={dtype!r}: the plain loop runs 'fp32' or 'bf16' (autocast)")
    if optimizer not in ("sgd", "adamw"):
        raise ValueError(f"optimizer={optimizer!r}: use 'sgd' or 'adamw'")
    prof = load_profile(profile)
    if kernels_only:
        prof = prof.kernels_only()
    cfg = model_config(model)
    with fake_mode():
        torch.manual_seed(0)
        net = GPT(cfg)
        opt = (torch.optim.SGD(net.parameters(), lr=0.1, foreach=True) if optimizer == "sgd"
               else torch.optim.AdamW(net.parameters(), lr=1e-4, foreach=True))
        x = torch.zeros(batch, cfg.seq_len + 1, dtype=torch.long)
        inp, tgt = x[:, :-1], x[:, 1:]
        clock = VirtualClock(prof, rank=0)
        meter = AllocatorMeter(workspace=prof.blas_workspace if prof.async_launch else 0)
        meter.track([*net.parameters(), x])
        times, splits = [], []
        for _ in range(steps):
            clock.sync()
            start, before = clock.now(), dict(clock.split)
            with clock.counting(), meter:
                with gpu_autocast(torch.bfloat16, enabled=dtype == "bf16"):
                    loss = lm_loss(net(inp), tgt)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del loss
            clock.sync()
            times.append(clock.now() - start)
            splits.append({k: clock.split[k] - before[k] for k in clock.split})
    steady = times[1:] if len(times) > 1 else times
    return {"model": model, "batch": batch, "dtype": dtype, "optimizer": optimizer,
            "profile": prof.name, "label": "emulated", "step_s": statistics.median(steady),
            "steps_s": times, "peak_bytes": meter.peak, "split": splits[-1]}


def configurations(reference: dict) -> list[tuple[str, dict]]:
    """``(key, kwargs of emulate_plain_steps)`` of each plain step in a GPU reference file."""
    out = []
    for key in reference["plain_pytorch_steps"]:
        model, batch, dtype, optimizer = key.split()
        out.append((key, {"model": model, "batch": int(batch[1:]), "dtype": dtype, "optimizer": optimizer}))
    return out


def fit_model_code_factor(profile, *, reference: dict, row: str, tolerance: float = 0.002) -> float:
    """The ``model_code_factor`` that makes the emulated `row` step of `reference` equal its
    measured median (bisection; the step of a launch-bound model grows with the factor).
    `mgpukit bench reference` fits it on the shipped H200 reference, `mgpukit calibrate` on the
    GPU it runs on."""
    target = reference["plain_pytorch_steps"][row]["median_ms"] * 1e-3
    kwargs = dict(configurations(reference))[row]
    base = load_profile(profile)
    lo, hi = 1.0, 5.0
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        step = emulate_plain_steps(profile=dataclasses.replace(base, model_code_factor=mid), steps=2, **kwargs)["step_s"]
        lo, hi = (mid, hi) if step < target else (lo, mid)
    return (lo + hi) / 2
