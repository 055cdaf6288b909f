"""Sharding controls for notebook 06 (its figures: `mgpukit.plots.sharding`).

- `fits(psi, dp=, dtype=, optimizer=)`: the ZeRO stages whose model states fit a GPU.
- `zero_explorer()`: a model-size dropdown and sliders for dp, precision, optimizer that redraw
  the stages at once against a GPU's memory, saying which stages fit. Headless (CI) it draws
  its first figure once.
"""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.shapes import get_shape, list_shapes, param_count
from mgpukit.display import show
from mgpukit.plots.sharding import plot_zero_stages
from mgpukit.studies.sharding import model_state_table

def fits(psi: float, *, dp: int, dtype: str, optimizer: str, profile: str = "h100-nvlink") -> list[str]:
    """The stages whose model states fit in the profile's usable memory."""
    hw = load_profile(profile)
    table = model_state_table(psi, dp=dp, dtype=dtype, optimizer=optimizer)
    return [f"ZeRO-{r['zero']}" if r["zero"] else "DDP" for r in table
            if r["total"] <= hw.usable_memory_bytes]


def zero_explorer(*, model: str = "7b", dp: int = 8, dtype: str = "bf16", optimizer: str = "adamw"):
    """Dropdowns for the model and precision, a slider for dp: the stages redraw at once."""
    size = w.Dropdown(options=[s for s in list_shapes() if s != "gpt-tiny"], value=model, description="model")
    ranks = w.IntSlider(value=dp, min=1, max=512, description="dp ranks", continuous_update=False)
    prec = w.Dropdown(options=["bf16", "fp32"], value=dtype, description="precision")
    opt = w.Dropdown(options=["adamw", "sgd"], value=optimizer, description="optimizer")
    out = w.Output()

    def draw(_=None):
        psi = param_count(get_shape(size.value))
        ok = fits(psi, dp=ranks.value, dtype=prec.value, optimizer=opt.value)
        usable = load_profile("h100-nvlink").usable_memory_bytes
        line = (f"{size.value}: Ψ = {psi / 1e9:.2f} B parameters; model states fit an H100's {usable / 1e9:.1f} GB "
                f"usable with: "
                f"{', '.join(ok) if ok else 'none of them — add dp ranks, or tp / pp'} (predicted)")
        show(out, line, plot_zero_stages(psi, dp=ranks.value, dtype=prec.value, optimizer=opt.value,
                                         label=size.value))

    for control in (size, ranks, prec, opt):
        control.observe(draw, names="value")
    display(w.VBox([w.HBox([size, ranks]), w.HBox([prec, opt]), out]))
    draw()
