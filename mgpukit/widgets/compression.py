"""Gradient-compression controls for notebook 03 (its figures: `mgpukit.plots.compression`).

- `compression_explorer()`: a top-k ratio slider that redraws the *predicted* bytes per step
  (top-k vs fp32 and the other methods) at once; its button launches a short real `dp-topk`
  run at that ratio and overlays its loss curve on the fp32 reference's. Headless (CI), it
  draws its first figure once and launches nothing.
"""
from __future__ import annotations

import ipywidgets as widgets
from IPython.display import display

from mgpukit.config import RunConfig
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons import fp32_reference, run_compressed
from mgpukit.plots import plot_loss_parity
from mgpukit.plots.compression import plot_bytes_vs_ratio
from mgpukit.strategies.compression.common import steady_bytes_per_step


def compression_explorer(*, config: RunConfig | None = None, workers: int = 2, steps: int = 30,
                         ratio: float = 0.01):
    """Slider: top-k ratio -> predicted bytes per step. Button: a real short run at that ratio."""
    cfg = (config or RunConfig()).replace(steps=steps)
    slider = widgets.FloatLogSlider(value=ratio, base=10, min=-4, max=0, step=0.125,
                                    description="top-k ratio", readout_format=".4f",
                                    continuous_update=False)
    button = widgets.Button(description=f"run {steps} steps", icon="play")
    bytes_out, run_out = widgets.Output(), widgets.Output()

    def draw_bytes(*_):
        show(bytes_out, plot_bytes_vs_ratio(cfg, workers, slider.value))

    def launch_run(*_):
        show(run_out, f"running dp-topk at ratio {slider.value:.4f} on {workers} workers, {steps} steps…")
        with errors_shown_in(run_out):
            rec = run_compressed("dp-topk", workers=workers, config=cfg, options={"ratio": slider.value})
            ref = fp32_reference(cfg)
            p = rec["parity"]
            predicted = rec["theory"]["comm_bytes"]
            show(run_out,
                 f"bytes sent per step: measured {steady_bytes_per_step(rec):,.0f} · "
                 f"predicted {predicted:,.0f} · fp32 {rec['theory']['comm_bytes_uncompressed']:,.0f}\n"
                 f"final loss {p['final_loss']:.3f} vs fp32 {p['reference_final_loss']:.3f} "
                 f"({100 * p['final_rel_gap']:.1f} % apart)",
                 plot_loss_parity([ref, rec]))

    slider.observe(draw_bytes, names="value")
    button.on_click(launch_run)
    draw_bytes()  # headless: this one drawing is all that happens
    box = widgets.VBox([widgets.HBox([slider, button]), bytes_out, run_out])
    display(box)
    return box
