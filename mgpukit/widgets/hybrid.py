"""Notebook 08's control: move the node boundary, see which axes cross it (`placement_lab`)."""
from __future__ import annotations

import ipywidgets as w
from IPython.display import display

from mgpukit.display import errors_shown_in, show
from mgpukit.lessons.hybrid import crossing, node_placements, node_profile
from mgpukit.plots import plot_timeline
from mgpukit.plots.style import PREDICTED
from mgpukit.studies.hybrid import dims_of


def placement_lab(dims=(2, 2, 2), *, initial: dict | None = None, base: str = "h100-ib"):
    """Widget: move the node boundary (GPUs per node), press Run — the (dp, tp, pp) hybrid of
    gpt-tiny runs on 8 CPU workers under that placement's virtual clock (kernels only, as
    `node_placements`), and its step, the axes that cross nodes and its timeline (messages between
    nodes hatched) show beside the cost model's prediction. `initial`: a `node_placements` row to
    show first."""

    d = dims_of(dims)
    per_node = w.Dropdown(options=[8, 4, 2, 1], value=4, description="GPUs per node",
                          style={"description_width": "initial"})
    button = w.Button(description="Run it (emulated, 8 workers)", icon="play", button_style="primary",
                      layout=w.Layout(width="auto"))
    out = w.Output()

    def result(row):
        emu, pred = row["emulated_s"], row["predicted_s"]
        text = (f"{row['gpus_per_node']} GPU/node, {row['nodes']} node(s); axes crossing nodes: "
                f"{', '.join(row['across_nodes']) or 'none'} · step emulated (kernels only) {emu * 1e6:,.1f} µs · "
                f"{PREDICTED} {pred * 1e6:,.1f} µs (×{pred / emu:.2f}"
                + ("; the cost model adds the pipeline's messages and the bubble end to end, the clock overlaps them)"
                   if pred / emu > 1.05 else ")"))
        if row.get("warning"):
            text += f"\nthe kit warns: {row['warning']}"
        show(out, text, plot_timeline(row["record"], step=1))

    def changed(*_):
        hw = node_profile(per_node.value, base)
        across = [a for a, x in crossing(d, hw).items() if x]
        show(out, f"{per_node.value} GPU/node: {', '.join(across) or 'no axis'} would cross nodes — press Run "
                  "(about 10 s of this machine)")

    def run_it(*_):
        show(out, f"launching 8 emulated workers, {per_node.value} GPU/node…")
        with errors_shown_in(out):
            (row,) = node_placements(d, gpus_per_node=(per_node.value,), emulate=(per_node.value,), base=base)
            result(row)

    per_node.observe(changed, names="value")
    button.on_click(run_it)
    if initial is not None:
        per_node.value = initial["gpus_per_node"]
        result(initial)
    else:
        changed()
    box = w.VBox([w.HBox([per_node, button]), out])
    display(box)
    return box


