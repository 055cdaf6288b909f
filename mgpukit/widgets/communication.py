"""Alpha-beta explorer: pick a message size, a number of ranks, an algorithm and a hardware
profile; see the predicted all-reduce time and bus bandwidth at once (no launch: cost model).
The numbers: `mgpukit.studies.alpha_beta`; the figure: `mgpukit.plots.alpha_beta`.

Headless (CI runs the notebooks) it draws its initial figure once.
"""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.costmodel.hardware import list_profiles
from mgpukit.display import show
from mgpukit.plots.alpha_beta import plot_alpha_beta
from mgpukit.studies.alpha_beta import ALGORITHMS, describe_prediction, predict_all_reduce


def alpha_beta_explorer(*, nbytes: float = 16 * 2**20, n: int = 8, algorithm: str = "ring",
                        profile: str = "h100-nvlink"):
    """Sliders for message size and ranks, dropdowns for algorithm and profile; redraws at once."""
    size = w.FloatLogSlider(value=nbytes, base=2, min=10, max=31, step=0.25, description="bytes",
                            readout_format=".3s", continuous_update=False)
    ranks = w.IntSlider(value=n, min=2, max=64, description="ranks n", continuous_update=False)
    algo = w.Dropdown(options=list(ALGORITHMS), value=algorithm, description="algorithm")
    prof = w.Dropdown(options=list_profiles(), value=profile, description="profile")
    out = w.Output()

    def draw(_=None):
        if algo.value == "tree" and ranks.value & (ranks.value - 1):
            line = (f"tree (recursive halving-doubling) needs a power-of-two n; {ranks.value} is "
                    f"not — pick 2, 4, 8, 16, 32 or 64, or another algorithm.")
        else:
            line = describe_prediction(predict_all_reduce(size.value, ranks.value, algo.value, prof.value))
        show(out, line, plot_alpha_beta(size.value, ranks.value, algo.value, prof.value))

    for control in (size, ranks, algo, prof):
        control.observe(draw, names="value")
    display(w.VBox([w.HBox([size, ranks]), w.HBox([algo, prof]), out]))
    draw()
