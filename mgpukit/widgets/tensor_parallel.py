"""Notebook 05's controls: the predicted split of a step over each link (`tp_explorer`) and a
real emulated tp run beside its prediction (`tp_run_lab`)."""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.costmodel import list_shapes
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons.tensor_parallel import emulated_run
from mgpukit.plots import plot_timeline
from mgpukit.plots.style import PREDICTED
from mgpukit.plots.tensor_parallel import plot_tp_step_split
from mgpukit.studies.tp_links import LINKS, explorer_dtype, predicted_tp_step, shape_of, steady_step


EXPLORER_BATCH = 8  # sequences per step in `tp_explorer`: one micro-batch, as the runs of notebook 05


def tp_explorer(model: str = "1.3b"):
    """Widget: a model, a tp degree — the predicted step split into compute and tensor-parallel
    communication over each link (the cost model), redrawn at once."""

    models = w.Dropdown(options=list_shapes(), value=model, description="model")
    degree = w.SelectionSlider(options=[1, 2, 4, 8, 16, 32], value=8, description="tp")
    out = w.Output()

    def draw(_=None):
        with errors_shown_in(out):
            names = list(LINKS)
            dtype = explorer_dtype(models.value)
            rows = [predicted_tp_step(models.value, degree.value, link, global_batch=EXPLORER_BATCH, dtype=dtype)
                    for link in names]
            fig = plot_tp_step_split(models.value, degree.value, rows, names, batch=EXPLORER_BATCH,
                                     seq_len=shape_of(models.value).seq_len, dtype=dtype)
            share = ", ".join(f"{n.split(' (')[0]} {r['comm_tp_s'] / r['total_s']:.0%}" for n, r in zip(names, rows))
            show(out, f"share of the step spent in tp communication ({PREDICTED}): {share}", fig)

    for c in (models, degree):
        c.observe(draw, names="value")
    draw()
    box = w.VBox([w.HBox([models, degree]), out])
    display(box)
    return box


def tp_run_lab(initial: dict | None = None):
    """Widget: pick a tp degree and a link, press Run — gpt-tiny runs `tp` for real under that
    link's virtual clock (emulated, 2 steps; `emulated_run`), and its step and timeline show
    beside the cost model's prediction on the same convention (kernels only, or both with the
    host's launches). `initial`: a record from `emulated_run` to show first."""

    degree = w.Dropdown(options=[1, 2, 4], value=2, description="tp")
    link = w.Dropdown(options=list(LINKS), value=list(LINKS)[0], description="link",
                      layout=w.Layout(width="420px"), style={"description_width": "initial"})
    launches = w.Checkbox(value=False, description="charge host launches (as a GPU runs it)", indent=False)
    button = w.Button(description="Run it (emulated)", icon="play", button_style="primary",
                      layout=w.Layout(width="auto"))
    out = w.Output()

    def result(rec):
        t, name = rec["layout"]["tp"], rec["link"]
        emu = steady_step(rec)
        pred = predicted_tp_step("gpt-tiny", t, name, kernels_only=rec["kernels_only"])["total_s"]  # one convention
        clock = "kernels only" if rec["kernels_only"] else "with host launches"
        show(out, f"gpt-tiny, tp={t}, {name}, {clock} on both sides: step emulated {emu * 1e6:,.1f} µs · "
                  f"{PREDICTED} {pred * 1e6:,.1f} µs (predicted / emulated {pred / emu:.2f})",
             plot_timeline(rec, step=1))

    def changed(*_):
        show(out, f"press Run: tp={degree.value} over {link.value}, "
                  f"{'with host launches' if launches.value else 'kernels only'} — about 5 s of this machine")

    def run_it(*_):
        show(out, f"launching {degree.value} emulated worker(s)…")
        with errors_shown_in(out):
            result(emulated_run(degree.value, link.value, kernels_only=not launches.value))

    for c in (degree, link, launches):
        c.observe(changed, names="value")
    button.on_click(run_it)
    if initial is not None:
        degree.value, link.value, launches.value = initial["layout"]["tp"], initial["link"], not initial["kernels_only"]
        result(initial)
    else:
        changed()
    box = w.VBox([w.HBox([degree, link]), w.HBox([launches, button]), out])
    display(box)
    return box


