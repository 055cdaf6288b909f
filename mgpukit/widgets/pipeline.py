"""Pipeline-schedule controls for notebook 04 (its figures: `mgpukit.plots.pipeline`).

- `schedule_explorer()`: a schedule dropdown and sliders for p, m, v that redraw the predicted
  Gantt and bubble at once; its button runs the schedule for real (emulated, the lab's
  equal-cost stages) and draws the measured timeline under the prediction. Headless (CI), it
  draws its first figure once and launches nothing.
"""
from __future__ import annotations

import ipywidgets as widgets
from IPython.display import display

from mgpukit.costmodel.schedules import SCHEDULES
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons import run_lab
from mgpukit.plots import plot_timeline
from mgpukit.plots.pipeline import plot_schedule, predicted_record
from mgpukit.plots.style import PREDICTED


def _summary(name: str, p: int, m: int, v: int) -> str:
    rec = predicted_record(name, p, m, v)
    held = rec["theory"]["microbatches_in_flight"]
    unit = " chunks" if v > 1 else " micro-batches"
    return (f"<b>{PREDICTED}</b>: bubble {rec['theory']['bubble_fraction']:.1%} "
            f"(closed form), {rec['bubble_fraction']:.1%} (simulator) · activations held per "
            f"rank: {held}{unit}")


def schedule_explorer(*, name: str = "1f1b", p: int = 4, m: int = 8, v: int = 2):
    """Dropdown + sliders -> predicted Gantt and bubble; button -> an emulated run of it."""
    pick = widgets.Dropdown(options=list(SCHEDULES), value=name, description="schedule")
    sp = widgets.IntSlider(value=p, min=1, max=8, description="p (ranks)", continuous_update=False)
    sm = widgets.IntSlider(value=m, min=1, max=24, description="m (micro)", continuous_update=False)
    sv = widgets.IntSlider(value=v, min=1, max=4, description="v (chunks)", continuous_update=False)
    button = widgets.Button(description="Run it for real (emulated)", icon="play",
                            layout=widgets.Layout(width="auto"))
    text, out, run_out = widgets.HTML(), widgets.Output(), widgets.Output()

    def chosen():  # what the controls say: (schedule, p, m, v)
        return pick.value, sp.value, sm.value, sv.value if pick.value == "interleaved" else 1

    def draw(*_):
        sv.disabled = pick.value != "interleaved"
        # a run drawn for the previous choice must not sit under the new one
        show(run_out, "press the button to run this schedule (emulated) and compare")
        try:
            args = chosen()
            text.value = _summary(*args)
            show(out, plot_schedule(*args))
        except ValueError as e:  # e.g. interleaved needs m to be a multiple of p
            text.value = f"<b>can't run this:</b> {e}"

    def run_it(*_):
        s, pp, mm, vv = chosen()
        show(run_out, f"launching {pp} emulated workers: {s}, m={mm}, v={vv} (equal stages, p2p free)…")
        with errors_shown_in(run_out):
            try:
                (rec,) = run_lab([{"schedule": s, "m": mm, "v": vv}], p=pp)
            except ValueError as e:
                show(run_out, f"can't run this: {e}")
                return
            show(run_out, f"bubble: emulated {rec['bubble_fraction']:.1%} · predicted "
                          f"{rec['theory']['bubble_fraction']:.1%}",
                 plot_timeline(rec, step=1))

    for w in (pick, sp, sm, sv):
        w.observe(draw, names="value")
    button.on_click(run_it)
    draw()  # headless: this one drawing is all that happens
    box = widgets.VBox([widgets.HBox([pick, button]), widgets.HBox([sp, sm, sv]), text, out,
                        run_out])
    display(box)
    return box
