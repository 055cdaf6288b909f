"""Widgets for the first notebook: launch a DDP run with the workers and mode you pick."""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.display import errors_shown_in, show
from mgpukit.experiment import run
from mgpukit.plots import format_time, plot_timeline, source_label


def run_explorer(*, steps: int = 5, run_now: bool = True):
    """Workers slider, mode dropdown and a Run button; shows the run's timeline and summary.

    Headless (CI) it runs once with the initial settings so the cell still shows a figure."""
    workers = w.IntSlider(value=2, min=1, max=4, description="workers")
    mode = w.Dropdown(options=[("measured on this machine", "cpu"),
                               ("emulated on h100-nvlink", "h100-nvlink"),
                               ("emulated on a100-nvlink", "a100-nvlink")],
                      value="cpu", description="mode")
    button = w.Button(description="Run DDP", button_style="primary")
    out = w.Output()

    def go(_=None):
        show(out, f"running DDP on {workers.value} workers…")
        with errors_shown_in(out):
            emulated = mode.value != "cpu"
            rec = run("ddp", workers=workers.value, steps=steps, parity=False,
                      mode="emulated" if emulated else "cpu",
                      profile=mode.value if emulated else None)
            median = sorted(rec['step_time_s'])[len(rec['step_time_s']) // 2]
            show(out, f"median step {format_time(median)}, {rec['tokens_per_s']:,.0f} tokens/s "
                      f"— {source_label(rec)}",
                 plot_timeline(rec, step=steps - 1))

    button.on_click(go)
    display(w.VBox([w.HBox([workers, mode, button]), out]))
    if run_now:
        go()
