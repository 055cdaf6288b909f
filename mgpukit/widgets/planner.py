"""The planner behind controls (notebook 09): every figure is the cost model's prediction.

- `PlannerExplorer` / `planner_explorer()`: model size, GPUs, profile, layout (dp is what tp and
  pp leave), schedule, ZeRO stage, checkpointing, precision, micro-batch, global batch, tokens and
  price -> the three figures (`mgpukit.plots.planner`) redrawn (one plan and eleven points of
  speedup: milliseconds) and
  one sentence: does it fit, and if not, which change would (computed). Headless (CI) it draws
  once; tests drive it by setting control values.

The three figures go into an ``Output`` in one assignment (`mgpukit.display.show`), as
the other kit widgets do: each change replaces them. ``PlannerExplorer(in_place=True)`` makes
them ``plotly.graph_objects.FigureWidget``s instead, made once and updated in place (one
``batch_update`` each: one message to the browser, the same traces restyled); that needs
``anywidget`` (plotly ≥ 6 renders FigureWidget through it). It is not the default because in
Chromium 150 / JupyterLab 4.6 with plotly 7.1 and anywidget 0.11, on a loaded machine, two of the
three FigureWidgets drew empty default axes (2026-11-26, `make test-browser`; an earlier session
saw the same once and could not reproduce it) — an Output of plain figures has always drawn.
"""
from __future__ import annotations

import ipywidgets as w
import plotly.graph_objects as go
from IPython.display import display

from mgpukit.costmodel.actions import SCHEDULES
from mgpukit.costmodel.hardware import list_profiles
from mgpukit.costmodel.shapes import list_shapes
from mgpukit.costmodel.training_cost import format_duration, format_money, parse_tokens, time_to_train
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons.planning import GPU_COUNTS, explain, speedup_curve
from mgpukit.plots.planner import plot_plan_memory, plot_plan_speedup, plot_plan_step_time
from mgpukit.plots.style import PREDICTED

try:  # plotly >= 6 renders FigureWidget through anywidget
    import anywidget  # noqa: F401

    FigureWidget = go.FigureWidget
except ImportError:
    FigureWidget = None


def update_in_place(widget, fig: go.Figure) -> None:
    """Give `widget` (a FigureWidget with the same traces as `fig`, in the same order) `fig`'s
    data and layout in one ``batch_update``: one message to the browser."""
    if len(widget.data) != len(fig.data):
        raise ValueError(f"update_in_place: {len(widget.data)} traces on show, {len(fig.data)} new ones")
    with widget.batch_update():
        for old, new in zip(widget.data, fig.data):
            old.update(new.to_plotly_json(), overwrite=True)
        layout = fig.layout.to_plotly_json()
        layout.pop("template", None)  # the same theme every time: not re-sent
        widget.layout.update(layout, overwrite=True)


class PlannerExplorer:
    """The controls, the three figures and the sentence; `redraw()` runs on every change.

    ``controls`` maps a name (``model, gpus, profile, tp, pp, schedule, v, zero, checkpointing,
    dtype, micro_batch, global_batch, tokens, price``) to its widget; ``state`` holds the last
    plan, sentence, figures and speedup rows (tests read it)."""

    def __init__(self, *, model="70b", gpus=64, profile="h100-ib", tp=8, pp=1, zero=1, checkpointing="selective",
                 schedule="1f1b", v=2, dtype="bf16", micro_batch=1, global_batch=512, tokens="2T", price=2.0,
                 in_place: bool = False):
        self.figure_widget = FigureWidget if in_place else None  # None: plain figures in the Output

        profiles = [p for p in list_profiles() if not p.startswith("this-machine")]
        wide = {"description_width": "initial"}  # the label in full ("v (interleaved)", "global batch")
        self.controls = c = {
            "model": w.Dropdown(options=[s for s in list_shapes() if s != "gpt-tiny"], value=model, description="model"),
            "gpus": w.Dropdown(options=list(GPU_COUNTS) + [2048, 4096], value=gpus, description="GPUs"),
            "profile": w.Dropdown(options=profiles, value=profile, description="profile"),
            "tp": w.Dropdown(options=[1, 2, 4, 8, 16], value=tp, description="tp"),
            "pp": w.Dropdown(options=[1, 2, 4, 5, 8, 10, 16, 20, 32], value=pp, description="pp"),
            "schedule": w.Dropdown(options=list(SCHEDULES), value=schedule, description="schedule"),
            "v": w.IntSlider(value=v, min=2, max=8, description="v (interleaved)", continuous_update=False, style=wide),
            "zero": w.ToggleButtons(options=[0, 1, 2, 3], value=zero, description="ZeRO"),
            "checkpointing": w.ToggleButtons(options=["none", "selective", "full"], value=checkpointing,
                                             description="checkpointing", style=wide),
            "dtype": w.ToggleButtons(options=["bf16", "fp16", "fp8", "fp32"], value=dtype, description="precision"),
            "micro_batch": w.Dropdown(options=[1, 2, 4, 8], value=micro_batch, description="micro-batch", style=wide),
            "global_batch": w.Dropdown(options=[256, 512, 1024, 2048, 4096], value=global_batch,
                                       description="global batch", style=wide),
            "tokens": w.Text(value=tokens, description="tokens", continuous_update=False),
            "price": w.BoundedFloatText(value=price, min=0, max=1e4, step=0.1, description="$/GPU-hour", style=wide),
        }
        self.dp_label = w.HTML()
        self.sentence = w.HTML()
        self.out = w.Output()  # a callback's traceback (and the figures when there is no FigureWidget)
        self.figure_box = w.VBox()  # the FigureWidgets, made on the first plan
        self.widgets = None  # name -> FigureWidget, or None while not made (or not available)
        self.state: dict = {}
        for control in c.values():
            control.observe(self.redraw, names="value")
        self.redraw()
        self.box = w.VBox([
            w.HBox([c["model"], c["gpus"], c["profile"]]),
            w.HBox([c["tp"], c["pp"], self.dp_label]),
            w.HBox([c["schedule"], c["v"], c["micro_batch"], c["global_batch"]]),
            c["zero"], c["checkpointing"], c["dtype"],
            w.HBox([c["tokens"], c["price"]]),
            self.sentence, self.figure_box, self.out,
        ])

    def layout_kwargs(self) -> dict:
        c = self.controls
        return {k: c[k].value for k in ("tp", "pp", "zero", "checkpointing", "schedule", "v", "dtype",
                                          "micro_batch", "global_batch")}

    def redraw(self, *_):
        """Plan the chosen layout; redraw the sentence and the figures."""
        c, kw = self.controls, self.layout_kwargs()
        gpus = c["gpus"].value
        tp_pp = kw["tp"] * kw["pp"]
        self.dp_label.value = (f"&nbsp;→ dp = {gpus // tp_pp}" if gpus % tp_pp == 0
                               else f"&nbsp;→ tp × pp = {tp_pp} does not divide {gpus}")
        with errors_shown_in(self.out):
            result = explain(c["model"].value, gpus, c["profile"].value, **kw)
            self.state = {"explain": result, "plan": result["plan"], "sentence": result["sentence"]}
            if result["plan"] is None:
                self.sentence.value = f"<b>{result['sentence']}</b>"
                self.figure_box.layout.display = "none"  # no stale figures beside the refusal
                show(self.out)
                return
            pl = result["plan"]
            self.sentence.value = f"<b>{result['sentence']}</b><br>{self._cost_line(pl)}"
            rest = {k: v for k, v in kw.items() if k not in ("tp", "pp", "global_batch")}
            rows = speedup_curve(pl.model, pl.profile, tp=kw["tp"], pp=kw["pp"], global_batch=kw["global_batch"],
                                 **rest)
            figures = {"memory": plot_plan_memory(pl), "speedup": plot_plan_speedup(
                rows, title=f"speedup of tp {kw['tp']} × pp {kw['pp']} × dp, global batch {kw['global_batch']}"),
                "time": plot_plan_step_time(pl)}
            self.state.update(speedup=rows, figures=self._display(figures))

    def _display(self, figures: dict) -> dict:
        """Show `figures`: fill the Output, or (``in_place``) restyle the FigureWidgets.
        Returns what is on show (the tests read its traces)."""
        if self.widgets is None and self.figure_widget is not None:
            self.widgets = {name: self.figure_widget(fig) for name, fig in figures.items()}
            self.figure_box.children = tuple(self.widgets.values())
        elif self.widgets is not None:
            for name, fig in figures.items():
                update_in_place(self.widgets[name], fig)
        if self.widgets is None:
            show(self.out, *figures.values())
            return figures
        self.figure_box.layout.display = None
        show(self.out)  # a traceback from an earlier change, if any, is gone
        return self.widgets

    def _cost_line(self, pl) -> str:
        c = self.controls
        try:
            tokens = parse_tokens(c["tokens"].value, what="tokens")
        except ValueError as e:
            return str(e)
        b = time_to_train(pl, tokens, price_per_gpu_hour=c["price"].value)
        self.state["training"] = b
        r = b["ranges"]
        return (f"{tokens:.3g} tokens: {b['steps']:,} steps, {format_duration(b['seconds'])} on {pl.gpus} GPUs "
                f"({format_duration(r['seconds'][0])} … {format_duration(r['seconds'][1])}), "
                f"{b['gpu_hours']:,.0f} GPU-hours, {format_money(b['cost'])} "
                f"({format_money(r['cost'][0])} … {format_money(r['cost'][1])}) at ${b['price_per_gpu_hour']:.2f}/GPU-hour "
                f"— {PREDICTED}; ranges: the planner's {pl.error_bar.describe()}")


def planner_explorer(**kw) -> PlannerExplorer:
    """Show the planner's controls and figures (see `PlannerExplorer`); returns the explorer."""
    ex = PlannerExplorer(**kw)
    display(ex.box)
    return ex
