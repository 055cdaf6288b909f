"""Gradient-compression controls and figures for notebook 03.

- `compression_explorer()`: a top-k ratio slider that redraws the *predicted* bytes per step
  (top-k vs fp32 and the other methods) at once; its button launches a short real `dp-topk`
  run at that ratio and overlays its loss curve on the fp32 reference's. Headless (CI), it
  draws its first figure once and launches nothing.
- `plot_bytes_vs_ratio`, `plot_step_time`, `plot_step_time_vs_bandwidth`: the figures it and
  the notebook use (`step_time_curves` and `breakeven_label`: the numbers behind the last
  one). Like `mgpukit.plots`, they take data, return a plotly Figure, and say in the title
  whether the numbers are predicted, measured or emulated.
"""
from __future__ import annotations

import statistics

import ipywidgets as widgets
import plotly.graph_objects as go
from IPython.display import display

from mgpukit.config import RunConfig
from mgpukit.costmodel.profile import Link
from mgpukit.display import errors_shown_in, show
from mgpukit.lessons import fp32_reference, run_compressed
from mgpukit.plots import plot_loss_parity
from mgpukit.plots.layout import finish
from mgpukit.plots.style import PREDICTED, byte_unit, series_color, source_label
from mgpukit.strategies.compression import theory
from mgpukit.strategies.compression.common import steady_bytes_per_step

# strategy name -> the method name of `theory.exchange_plan`
METHOD_OF = {"ddp": "fp32", "dp-fp16": "fp16", "dp-bf16": "bf16", "dp-int8": "int8",
             "dp-topk": "topk", "dp-powersgd": "powersgd"}


def plot_bytes_vs_ratio(cfg: RunConfig, workers: int, ratio: float) -> go.Figure:
    """Predicted bytes one rank sends per step: top-k as a function of its ratio (log-log),
    the fixed-size methods as horizontal lines, a ◆ at `ratio`."""
    shapes = theory.param_shapes(cfg)
    n = workers
    ratios = [10 ** (-4 + 4 * i / 80) for i in range(81)]
    topk = [theory.plan_bytes(theory.exchange_plan("topk", shapes, n, ratio=r), n) for r in ratios]
    at = theory.plan_bytes(theory.exchange_plan("topk", shapes, n, ratio=ratio), n)
    dense = theory.plan_bytes(theory.exchange_plan("fp32", shapes, n), n)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ratios, y=topk, name="top-k (all-gather of values + indices)",
                             mode="lines", line=dict(color=series_color(0))))
    for i, method in enumerate(("fp32", "fp16", "int8", "powersgd"), start=1):
        b = theory.plan_bytes(theory.exchange_plan(method, shapes, n), n)
        fig.add_trace(go.Scatter(x=[ratios[0], ratios[-1]], y=[b, b], mode="lines", name=method,
                                 line=dict(color=series_color(i), dash="dot" if i > 1 else "solid")))
    fig.add_trace(go.Scatter(x=[ratio], y=[at], mode="markers", name=f"ratio {ratio:.3g}",
                             marker=dict(symbol="diamond", size=12, color="black"),
                             hovertemplate=f"{at:,.0f} B per step ({dense / at:.1f}× fewer than fp32)"
                                           "<extra></extra>"))
    fig.update_layout(
        xaxis=dict(title="top-k ratio (fraction of gradient entries sent)", type="log"),
        yaxis=dict(title="bytes sent per rank per step", type="log"),
    )
    return finish(fig, title=f"Bytes sent per rank per step — {PREDICTED}",
                  subtitle=f"{cfg.model}, {n} workers · top-k at {ratio:.3g}: "
                           f"{at:,.0f} B vs fp32 {dense:,.0f} B ({dense / at:.1f}×) · "
                           f"top-k sends more than fp32 above ratio ≈ 1/n = {1 / n:.2g}")


def median_step_time(record: dict, *, skip: int = 2) -> float:
    """Median step time after `skip` warm-up steps (PowerSGD's first steps are dense)."""
    times = record["step_time_s"]
    return statistics.median(times[skip:] or times)


def plot_step_time(records: list[dict], *, skip: int = 2) -> go.Figure:
    """Median step time per strategy, one group of bars per source (profile or device)."""
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(source_label(rec), []).append(rec)
    scale = 1e6 if max(median_step_time(r, skip=skip) for r in records) < 1e-3 else 1e3
    unit = "µs" if scale == 1e6 else "ms"
    fig = go.Figure()
    for i, (label, recs) in enumerate(groups.items()):
        base = next((median_step_time(r, skip=skip) for r in recs if r["strategy"] == "ddp"), None)
        ys = [median_step_time(r, skip=skip) for r in recs]
        fig.add_trace(go.Bar(
            x=[r["strategy"] for r in recs], y=[y * scale for y in ys], name=label,
            marker_color=series_color(i),
            text=[f"{base / y:.1f}× vs ddp" if base else "" for y in ys], textposition="outside",
            hovertemplate=f"%{{x}}<br>%{{y:.3g}} {unit} per step<extra>{label}</extra>"))
    kinds = sorted({r["mode"] for r in records})
    fig.update_layout(barmode="group", yaxis_title=f"step time ({unit})")
    return finish(fig, title=f"Step time by compression method — {', '.join(kinds)}",
                  subtitle=f"median over steps ≥ {skip}; "
                           "speed-up relative to fp32 ddp on the same source")


DEFAULT_BETAS = [10 ** (8 + 4 * i / 120) for i in range(121)]  # 100 MB/s .. 1 TB/s


def step_time_curves(fast: list[dict], link: Link, *, alpha: float | None = None, betas=None,
                     skip: int = 2) -> dict[str, list[float]]:
    """{strategy: predicted step seconds at each β of `betas`}, from one emulated run per method.

    Each method's compute (forward, backward, optimizer, compress, decompress) is its emulated
    step time on `link` minus its predicted exchange time there; the curve adds the alpha-beta
    time of its exchange on a link (`alpha`, β)."""
    betas = betas or DEFAULT_BETAS
    alpha = link.alpha if alpha is None else alpha
    curves = {}
    for rec in fast:
        method, n = METHOD_OF[rec["strategy"]], rec["world_size"]
        plan = theory.exchange_plan(method, theory.param_shapes(RunConfig(**rec["config"])), n,
                                    **theory.knobs_of(method, rec["config"]["options"]))
        compute = median_step_time(rec, skip=skip) - theory.plan_time(plan, n, link)
        curves[rec["strategy"]] = [compute + theory.plan_time(plan, n, Link(alpha=alpha, beta=b))
                                   for b in betas]
    return curves


def plot_step_time_vs_bandwidth(fast: list[dict], link: Link, *, alpha: float | None = None,
                                betas=None, points=None, skip: int = 2) -> go.Figure:
    """Predicted step time vs link bandwidth β for each method, from one emulated run per method
    (`step_time_curves`). `points` [(record, β)] — runs emulated on other profiles — are drawn
    as ◆ at their β. The subtitle gives, for each method, the bandwidth below which it beats the
    fp32 `ddp` record."""
    betas = betas or DEFAULT_BETAS
    alpha = link.alpha if alpha is None else alpha
    curves = step_time_curves(fast, link, alpha=alpha, betas=betas, skip=skip)
    scale = 1e6 if max(max(ys) for ys in curves.values()) < 1e-3 else 1e3
    unit = "µs" if scale == 1e6 else "ms"
    fig = go.Figure()
    for i, (name, ys) in enumerate(curves.items()):
        fig.add_trace(go.Scatter(
            x=[b / 1e9 for b in betas], y=[y * scale for y in ys], mode="lines", name=name,
            line=dict(color=series_color(i)), legendgroup=name,
            hovertemplate=f"β %{{x:.3g}} GB/s<br>%{{y:.3g}} {unit} per step<extra>" + name + "</extra>"))
    names = list(curves)
    for rec, beta in points or []:
        i = names.index(rec["strategy"])
        fig.add_trace(go.Scatter(
            x=[beta / 1e9], y=[median_step_time(rec, skip=skip) * scale], mode="markers",
            marker=dict(symbol="diamond", size=11, color=series_color(i)),
            legendgroup=rec["strategy"], showlegend=False,
            hovertemplate=f"{rec['strategy']}: {source_label(rec)}<br>%{{y:.3g}} {unit}<extra></extra>"))
    pays = ", ".join(f"{k} {breakeven_label(curves[k], curves.get('ddp'), betas)}" for k in names if k != "ddp")
    fig.update_layout(
        xaxis=dict(title="link bandwidth β (GB/s, per GPU, one direction)", type="log"),
        yaxis=dict(title=f"step time ({unit})", type="log"),
    )
    return finish(fig, title=f"Step time vs link bandwidth — {PREDICTED} from emulated compute"
                             + ("; ◆ emulated runs" if points else ""),
                  subtitle=f"α = {alpha * 1e6:.3g} µs per hop · "
                           f"≥ 10 % faster than ddp below: {pays}")


def breakeven_bandwidth(times, dense_times, betas, *, margin: float = 0.1) -> float | None:
    """The largest β of the sweep at which `times` is at least `margin` faster than
    `dense_times` (None: nowhere). A margin, because a µs of implementation difference in
    compute is no reason to compress."""
    wins = [b for b, t, d in zip(betas, times, dense_times) if t < (1 - margin) * d]
    return max(wins) if wins else None


def breakeven_label(times, dense_times, betas=None) -> str:
    """`breakeven_bandwidth` in words: "12.3 GB/s", "never" or "at every β shown"."""
    betas = betas or DEFAULT_BETAS
    if dense_times is None:
        return "?"
    b = breakeven_bandwidth(times, dense_times, betas)
    if b is None:
        return "never"
    return "at every β shown" if b == max(betas) else f"{b / 1e9:.3g} GB/s"


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
