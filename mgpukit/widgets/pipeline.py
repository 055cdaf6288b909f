"""Pipeline-schedule controls and figures for notebook 04.

- `plot_schedule(name, p, m, v)`: the *predicted* Gantt of a schedule — the simulator
  (``mgpukit.costmodel.simulate``) runs the table with every stage costing the same
  (forward 1, backward 2; zero-bubble: input-grad 1, weight-grad 1) and free messages — drawn
  with ``mgpukit.plots.plot_timeline`` like any measured run, labelled "predicted".
- `compute_only(record, step=)`: a record's compute events only, for a clean Gantt.
- `plot_in_flight(records)`: activations held per rank, measured, one bar group per run.
- `schedule_explorer()`: a schedule dropdown and sliders for p, m, v that redraw the predicted
  Gantt and bubble at once; its button runs the schedule for real (emulated, the lab's
  equal-cost stages) and draws the measured timeline under the prediction. Headless (CI), it
  draws its first figure once and launches nothing.
"""
from __future__ import annotations

import ipywidgets as widgets
import plotly.graph_objects as go
from IPython.display import display

from mgpukit.costmodel.pipeline import bubble_fraction
from mgpukit.costmodel.schedules import SCHEDULES, build_schedule, max_in_flight
from mgpukit.costmodel.simulate import simulate
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons import run_lab
from mgpukit.plots import plot_timeline
from mgpukit.plots.layout import finish, retitle
from mgpukit.plots.style import PREDICTED, format_bytes, series_color, source_label


def predicted_record(name: str, p: int, m: int, v: int = 1) -> dict:
    """A result record (mode "analytic") whose timeline is the simulator's, for the plots."""
    table = build_schedule(name, p, m, v)
    tl = simulate(table, cost_f=1.0, cost_b=2.0)
    return {"strategy": f"{name}" + (f" v={v}" if v > 1 else "") + f" m={m}", "mode": "analytic",
            "profile": None, "world_size": p, "dims": {"dp": 1, "tp": 1, "pp": p},
            "timeline": [{**e, "step": 0} for e in tl.events],
            "bubble_fraction": tl.bubble_fraction,
            "theory": {"bubble_fraction": bubble_fraction(name, p, m, v),
                       "microbatches_in_flight": [max_in_flight(table, r) for r in range(p)]}}


def plot_schedule(name: str, p: int, m: int, v: int = 1) -> go.Figure:
    """Predicted per-rank Gantt of schedule ``name``; time in units of one stage's forward."""
    rec = predicted_record(name, p, m, v)
    fig = plot_timeline(rec)
    fig.update_layout(xaxis_title="time, in units of one stage's forward (backward = 2)")
    return retitle(fig, f"Schedule {rec['strategy']} on p={p} — {PREDICTED}",
                   f"schedule simulator: equal stages, free messages · bubble {rec['bubble_fraction']:.1%} "
                   f"(simulator), {rec['theory']['bubble_fraction']:.1%} (closed form) · gaps = idle")


def compute_only(record: dict, *, step: int | None = None) -> dict:
    """The record with only its compute events (of ``step``, if given): a cleaner Gantt when
    the messages are free, as in the lab."""
    keep = [e for e in record["timeline"] if e["stream"] == "compute"
            and (step is None or e.get("step") == step)]
    return {**record, "timeline": keep}


def plot_in_flight(records: list[dict]) -> go.Figure:
    """Peak activation memory held per rank (``ActivationMeter``), one bar group per record,
    each bar labelled with what it is worth in units of one forward's saved activations on that
    rank (its first stage's, or with v > 1 its first chunk's). The label need not be whole: the
    last stage also keeps its loss's inputs, and ZB-H1 after a `B` keeps only what its `W` needs."""
    fig = go.Figure()
    for i, rec in enumerate(records):
        ranks = sorted(rec["extra"], key=int)
        peaks = [rec["extra"][r]["activations_in_flight_peak"] for r in ranks]
        count = [rec["extra"][r].get("microbatches_in_flight_measured") for r in ranks]
        unit_bytes = [rec["extra"][r].get("activation_bytes_per_microbatch") for r in ranks]
        # the meter's unit is one forward's activations: a whole stage's, or with v > 1 one
        # chunk's (1/v of a stage) — say which on the bar, never call a chunk a micro-batch
        v = int(rec["extra"][ranks[0]].get("v") or (rec.get("theory") or {}).get("v") or 1)
        unit = "× a chunk's" if v > 1 else "× a micro-batch's"
        one = f"one chunk's (1/{v} stage)" if v > 1 else "one micro-batch's"
        # the number on the bar, its unit in the legend: "11.0 chunks" on a bar a quarter of a
        # rank's width was shrunk by plotly until unreadable
        fig.add_trace(go.Bar(
            x=[f"rank {r}" for r in ranks], y=[b / 1024 for b in peaks], name=f"{rec['strategy']} ({unit})",
            marker_color=series_color(i), text=[f"{c:.3g}" if c else "" for c in count],
            textposition="outside", textangle=0, cliponaxis=False, textfont=dict(size=15),
            hovertemplate=[f"{format_bytes(b)} = {c:.2f} × {format_bytes(u)}, {one} saved activations on this "
                           f"rank<extra>{rec['strategy']}</extra>" if c else "" for b, c, u in zip(peaks, count, unit_bytes)]))
    fig.update_layout(barmode="group", bargap=0.12, bargroupgap=0.04, yaxis_title="KiB", xaxis_title="pipeline rank",
                      uniformtext=dict(minsize=14, mode="show"))
    return finish(fig, title=f"Activations held per rank — measured bytes, {source_label(records[0])}",
                  subtitle="peak bytes saved for backward (ActivationMeter) · number on a bar: those bytes over one "
                           "forward's on that rank (a micro-batch's, or a chunk's of 1/v stage) — not always whole: "
                           "the last stage also keeps its loss's inputs, ZB-H1 keeps only W's after B")


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
