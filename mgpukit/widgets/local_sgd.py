"""Notebook 10's control: local SGD's period H, measured and emulated (`local_sgd_lab`)."""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.display import errors_shown_in, show
from mgpukit.lessons.local_sgd import local_sgd_emulated, rank_kernel_seconds
from mgpukit.plots import plot_timeline


def local_sgd_lab(*, initial: list[dict] | None = None):
    """Widget: pick H and a straggler's slowdown, press Run — local SGD on 2 emulated GPUs in
    two nodes (kernels only) runs at that H and at H = 1 (DDP's traffic), and their step times
    and the H run's timeline show. `initial`: rows of `local_sgd_emulated` to show first."""

    pick_h = w.Dropdown(options=[2, 4, 8], value=4, description="H")
    slow = w.Dropdown(options=[1.0, 2.0, 4.0], value=1.0, description="rank 1 slower ×",
                      style={"description_width": "initial"})
    button = w.Button(description="Run it (emulated)", icon="play", button_style="primary",
                      layout=w.Layout(width="auto"))
    out = w.Output()

    def result(rows, factor):
        one, many = rows[0], rows[1]
        who = f"rank 1 ×{factor:g}" if factor > 1 else "no straggler"
        if factor > 1:
            kernels = rank_kernel_seconds(many["record"])
            who += f" (its kernels took ×{kernels[1] / kernels[0]:.2f} rank 0's on the clock)"
        show(out, f"{who}: H=1 {one['emulated_s'] * 1e6:,.1f} µs per step, H={many['H']} "
                  f"{many['emulated_s'] * 1e6:,.1f} µs (emulated, kernels only) — ×{one['emulated_s'] / many['emulated_s']:.2f}; "
                  f"below, the H={many['H']} run's averaging step"
                  + (": the fast rank waits for the slow one only there, once every H steps" if factor > 1 else ""),
             plot_timeline(many["record"], step=len(many["record"]["step_time_s"]) - 1))

    def changed(*_):
        show(out, f"press Run: local SGD at H=1 and H={pick_h.value}, rank 1 ×{slow.value:g} — a few seconds")

    def run_it(*_):
        show(out, "launching 2 emulated workers, twice…")
        with errors_shown_in(out):
            result(local_sgd_emulated(H=(1, pick_h.value), straggler=slow.value), slow.value)

    for c in (pick_h, slow):
        c.observe(changed, names="value")
    button.on_click(run_it)
    if initial is not None:
        pick_h.value = initial[1]["H"]
        result(initial, 1.0)
    else:
        changed()
    box = w.VBox([w.HBox([pick_h, slow, button]), out])
    display(box)
    return box


