"""Notebook 00's launch-bound example: the tiny GPT on one emulated H100.

Eager PyTorch issues every op from the host — Python module code, autograd, the dispatcher,
`cudaLaunchKernel` — which costs microseconds per op (the profile's `op_overhead_*` and
`[launch]` figures, cited there), while the tiny GPT's kernels take a couple of microseconds on
an H100. So the GPU waits for the host: the step is set by the number of ops, not by FLOPs
(`mgpukit.measure.vclock`, "The host and the device"). CUDA graphs replay the whole step with
one launch (`torch.cuda.graph`, or `torch.compile(mode="reduce-overhead")`), and
`torch.compile` fuses elementwise ops into fewer kernels: both remove launches, not FLOPs.
"""
from __future__ import annotations
from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import OP_CONTEXTS, load_profile
from mgpukit.experiment import run
from mgpukit.measure.breakdown import time_split
from mgpukit.training.building import build_model_shapes


def launch_bound_study(record: dict | None = None, *, profile: str = "h100-nvlink",
                       model: str = "gpt-tiny", steps: int = 3, global_batch: int = 8) -> dict:
    """DDP of `model` on one emulated GPU, with and without the host's costs (`record`: an
    emulated run of it already made, e.g. the notebook's 1-GPU run; its profile, model and
    batch are used, and only the kernels-only run is made here).

    Returns the steady step with eager launches (`step_s`) and with kernels only
    (`kernels_only_step_s`), where the step went (`measure.breakdown.time_split`: `kernel_s`,
    `launch_wait_s`, `wait_s`, `host_s`, `launch_bound` = host / step), `graphed_step_s` — the
    step if one launch replayed it (CUDA graphs: the kernels back to back, plus one launch) —
    and the profile's dispatch figures in µs (`dispatch_us`, by op context)."""
    if record is not None:
        profile, model = record["profile"], record["config"]["model"]
        global_batch, steps = record["config"]["global_batch"], len(record["step_time_s"])
    gpu = load_profile(profile)
    kw = dict(mode="emulated", steps=steps, model=model, global_batch=global_batch, parity=False)
    split = time_split(record if record is not None else run("ddp", workers=1, profile=profile, **kw))
    kernels = time_split(run("ddp", workers=1, profile=gpu.kernels_only(), **kw))
    return {"profile": profile, "model": model, **split,
            "kernels_only_step_s": kernels["step_s"],
            "graphed_step_s": split["kernel_s"] + gpu.dispatch_overhead("no_grad"),
            "dispatch_us": {c: gpu.dispatch_overhead(c) * 1e6 for c in OP_CONTEXTS},
            "min_kernel_us": gpu.min_kernel_time * 1e6}


def gradient_tensors(model: str = "gpt-tiny") -> int:
    """How many parameter tensors `model` has — each one a gradient DDP's reducer hooks, copies
    into a bucket and (with the others of its bucket) all-reduces. Counted on the meta device."""
    return len(list(build_model_shapes(RunConfig(model=model)).parameters()))
