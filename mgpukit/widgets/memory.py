"""Memory controls for notebook 07 (its figures: `mgpukit.plots.memory`).

- `memory_explorer()`: model size, GPU count, sequence length, checkpointing and precision ->
  the breakdown redrawn from the cost model at once, and which layouts fit. Headless (CI), it
  draws its first figure once.
"""
from __future__ import annotations

import ipywidgets as widgets
from IPython.display import display

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.shapes import list_shapes
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons.memory import memory_table
from mgpukit.plots.memory import plot_memory_breakdown
from mgpukit.plots.style import PREDICTED


def memory_explorer(*, model: str = "7b", gpus: int = 8, profile: str = "h100-nvlink"):
    """Controls -> the predicted breakdown of each candidate layout and which fit in the
    profile's usable memory."""
    model_w = widgets.Dropdown(options=list_shapes(), value=model, description="model")
    gpus_w = widgets.Dropdown(options=[8, 16, 32, 64, 128, 256, 512], value=gpus, description="GPUs")
    seq_w = widgets.Dropdown(options=[1024, 2048, 4096, 8192, 16384], value=4096, description="seq len")
    ckpt_w = widgets.ToggleButtons(options=["none", "selective", "full"], value="selective",
                                   description="checkpointing")
    dtype_w = widgets.ToggleButtons(options=["bf16", "fp32"], value="bf16", description="precision")
    out = widgets.Output()

    def draw(*_):
        with errors_shown_in(out):
            rows = memory_table(model_w.value, gpus_w.value, profile=profile, seq_len=seq_w.value,
                                checkpointing=ckpt_w.value, dtype=dtype_w.value)
            fits = [r["layout"] for r in rows if r["fits"]]
            refused = [f"{r['layout']}: {r['error']}" for r in rows if "error" in r]
            usable = load_profile(profile).usable_memory_bytes
            text = (f"{model_w.value} on {gpus_w.value} GPUs, {usable / 1e9:.1f} GB usable each ({profile}) — "
                    f"{PREDICTED}: "
                    + (f"fits with {', '.join(fits)}" if fits else "no candidate layout fits")
                    + "".join(f"\n  cannot run {x}" for x in refused))
            show(out, text, plot_memory_breakdown(rows, title=f"{model_w.value}, {gpus_w.value} GPUs"))

    for w in (model_w, gpus_w, seq_w, ckpt_w, dtype_w):
        w.observe(draw, names="value")
    draw()  # headless: this one drawing is all that happens
    box = widgets.VBox([widgets.HBox([model_w, gpus_w, seq_w]), ckpt_w, dtype_w, out])
    display(box)
    return box


