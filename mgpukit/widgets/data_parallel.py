"""Widgets for notebook 01 (data parallelism): a scaling explorer driven by the cost model.

Pick a model, a hardware profile, how many GPUs and how much each holds; the figure redraws
at once with the *predicted* speedup of data parallelism — naive (all-reduce after backward)
against bucketed (overlapped, as DDP) — for strong or weak scaling. Nothing is launched: the
numbers are `mgpukit.costmodel.step_time` (see `strategies/data_parallel/theory.py`).
"""
from __future__ import annotations
from mgpukit.costmodel import list_profiles, list_shapes
from mgpukit.plots import plot_speedup, retitle
from mgpukit.strategies.data_parallel.theory import predicted_records
from mgpukit.widgets.output import show as show_in


def scaling_explorer(*, model: str = "125m", profile: str = "h100-ib", max_workers: int = 64,
                     micro_batch: int = 1, show: bool = True):
    """Sliders and dropdowns -> predicted speedup vs GPUs. Headless (CI) it draws once.

    `show=True` displays the controls (and returns None, so a notebook cell shows them once);
    `show=False` returns the widget box without displaying it."""
    import ipywidgets as w
    from IPython.display import display

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
    box = w.VBox([w.HBox([shapes, profiles, scaling]), w.HBox([workers, batch, bucket]), out])
    draw()
    if show:
        display(box)
        return None
    return box
