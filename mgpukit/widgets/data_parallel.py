"""Widgets for notebook 01 (data parallelism): a scaling explorer driven by the cost model.

Pick a model, a hardware profile, how many GPUs and how much each holds; the figure redraws
at once with the *predicted* speedup of data parallelism — naive (all-reduce after backward)
against bucketed (overlapped, as DDP) — for strong or weak scaling: the numbers are
`mgpukit.costmodel.step_time` (see `strategies/data_parallel/theory.py`). Its button runs the
real program on the chosen profile: torch's DDP on GPT-2 124M in shape mode at 1, 2 and 8
emulated GPUs (fake tensors, host launches charged, about a minute here), drawn beside the
closed form of the same step (`costmodel.gpt_step.ddp_step_time`) — the sliders' batch and
bucket size apply.
"""
from __future__ import annotations

import warnings

import ipywidgets as w
from IPython.display import display

from mgpukit.config import RunConfig
from mgpukit.costmodel import list_profiles, list_shapes
from mgpukit.costmodel.gpt_step import ddp_step_time
from mgpukit.costmodel.hardware import load_profile
from mgpukit.display import show as show_in
from mgpukit.experiment import run
from mgpukit.plots import plot_speedup, retitle
from mgpukit.runtime.launcher import OversubscribedWarning
from mgpukit.strategies.data_parallel.theory import predicted_records


def scaling_explorer(*, model: str = "125m", profile: str = "h100-ib", max_workers: int = 64,
                     micro_batch: int = 1, show: bool = True):
    """Sliders and dropdowns -> predicted speedup vs GPUs. Headless (CI) it draws once.

    `show=True` displays the controls (and returns None, so a notebook cell shows them once);
    `show=False` returns the widget box without displaying it."""
    counts = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if n <= max_workers]
    workers = w.SelectionSlider(options=counts, value=counts[-1], description="GPUs up to")
    profiles = w.Dropdown(options=list_profiles(), value=profile, description="profile")
    shapes = w.Dropdown(options=list_shapes(), value=model, description="model")
    batch = w.IntSlider(value=micro_batch, min=1, max=64, description="seqs / GPU")
    scaling = w.ToggleButtons(options=["weak", "strong"], value="weak", description="scaling",
                              tooltips=["each GPU keeps its batch", "the global batch is split"])
    bucket = w.FloatLogSlider(value=25, base=10, min=-1, max=3, description="bucket MB")
    out = w.Output()

    def draw(_=None):
        ns = [n for n in counts if n <= workers.value]
        kw = dict(micro_batch=batch.value, bucket_mb=bucket.value,
                  dtype="fp32" if shapes.value == "gpt-tiny" else "bf16")
        if scaling.value == "strong":  # the global batch of the largest count, split n ways
            kw["global_batch"] = batch.value * ns[-1]
        try:
            records = predicted_records(shapes.value, profiles.value, ns, **kw)
        except ValueError as e:  # e.g. a model that does not fit; say so instead of a trace
            show_in(out, f"cannot predict this layout: {e}")
            return
        fig = retitle(plot_speedup(records), f"Predicted {scaling.value}-scaling speedup — "
                                             f"{shapes.value} on {profiles.value} (cost model)")
        show_in(out, fig)

    for control in (workers, profiles, shapes, batch, scaling, bucket):
        control.observe(draw, names="value")
    button = w.Button(description="Emulate GPT-2 124M on 1, 2, 8 of these GPUs (shape mode, ~1 min)",
                      icon="play", layout=w.Layout(width="auto"))
    run_out = w.Output()

    def emulate(_=None):
        show_in(run_out, "running ddp on GPT-2 124M in shape mode at 1, 2 and 8 GPUs …")
        try:
            fig = emulated_scaling(profiles.value, scaling=scaling.value, seqs_per_gpu=batch.value,
                                   bucket_mb=bucket.value)
        except ValueError as e:
            show_in(run_out, f"cannot run this layout: {e}")
            return
        show_in(run_out, fig)

    button.on_click(emulate)
    box = w.VBox([w.HBox([shapes, profiles, scaling]), w.HBox([workers, batch, bucket]), out,
                  button, run_out])
    draw()
    if show:
        display(box)
        return None
    return box


def emulated_scaling(profile: str, *, scaling: str = "weak", seqs_per_gpu: int = 1, bucket_mb: float = 25,
                     gpus=(1, 2, 8)):
    """torch's DDP on GPT-2 124M in shape mode on `gpus` emulated GPUs of `profile`, with the
    closed form of the same steps (`costmodel.gpt_step.ddp_step_time` models DDP's reducer: its
    per-tensor bucket copies cost host time the kit's `dp-bucketed` does not spend, which shows
    once a GPU's share of the batch is small): a speedup figure (emulated vs predicted)."""
    per = seqs_per_gpu * (max(gpus) if scaling == "strong" else 1)  # strong: the global batch
    records = []
    for n in gpus:
        with warnings.catch_warnings():  # emulated GPUs may outnumber this machine's cores
            warnings.simplefilter("ignore", OversubscribedWarning)
            records.append(run("single" if n == 1 else "ddp", workers=n, steps=2, mode="emulated",
                               profile=profile, shape=True, model="gpt2-124m", parity=False,
                               global_batch=per if scaling == "strong" else per * n,
                               options={} if n == 1 else {"bucket_mb": bucket_mb}))
    cfg, hw = RunConfig(model="gpt2-124m").model_config(), load_profile(profile)
    closed = {n: ddp_step_time(cfg, global_batch=per if scaling == "strong" else per * n, workers=n, profile=hw,
                               bucket_bytes=bucket_mb * 2**20)["total_s"] for n in gpus}
    tokens = {n: (per if scaling == "strong" else per * n) / closed[n] for n in gpus}
    fig = plot_speedup(records, theory={n: tokens[n] / tokens[gpus[0]] for n in gpus})
    return retitle(fig, f"{scaling.capitalize()} scaling of GPT-2 124M, {seqs_per_gpu} seq/GPU, {bucket_mb:.3g} MB "
                        f"buckets — emulated (shape mode, {profile}, with host launches) vs predicted (closed form)")
