"""Alpha-beta explorer: pick a message size, a number of ranks, an algorithm and a hardware
profile; see the predicted all-reduce time and bus bandwidth at once (no launch: cost model).

Headless (CI runs the notebooks) it draws its initial figure once.
"""
from __future__ import annotations

import math

import ipywidgets as w
import plotly.graph_objects as go
from IPython.display import display

from mgpukit.costmodel import comm as cost
from mgpukit.costmodel.hardware import list_profiles, load_profile
from mgpukit.display import show
from mgpukit.plots.layout import finish
from mgpukit.plots.style import PREDICTED, series_color
from mgpukit.strategies.communication.collectives import predicted_time

ALGORITHMS = ("ring", "tree", "naive")
_SIZES = [2.0 ** (10 + k / 4) for k in range(0, 4 * 21 + 1)]  # 1 KiB .. 2 GiB


def predict_all_reduce(nbytes: float, n: int, algorithm: str = "ring", profile="h100-nvlink") -> dict:
    """Predicted time and bus bandwidth of one all-reduce (alpha-beta model; "tree" is
    recursive halving-doubling, power-of-two `n` only). The link is picked from the ranks' span:
    NVLink inside a node, the network beyond (`costmodel.comm.link_for_ranks`)."""
    hw = load_profile(profile)
    link = cost.link_for_ranks(range(n), hw)
    if algorithm == "ring":
        t = cost.allreduce_time(nbytes, n, link)
    else:
        t = predicted_time(algorithm, nbytes, n, link)
    latency = {"ring": 2 * (n - 1), "naive": 2 * (n - 1), "tree": 2 * math.log2(n)}[algorithm] * link.alpha
    return {"algorithm": algorithm, "bytes": nbytes, "n": n, "profile": hw.name,
            "link": {"alpha": link.alpha, "beta": link.beta},
            "time_s": t, "busbw": cost.bus_factor("all_reduce", n) * nbytes / t if t else math.inf,
            "latency_share": latency / t if t else 0.0}


def plot_alpha_beta(nbytes: float, n: int, algorithm: str = "ring", profile="h100-nvlink") -> go.Figure:
    """Predicted bus bandwidth vs message size for each algorithm, the chosen point marked."""
    hw = load_profile(profile)
    fig = go.Figure()
    for i, algo in enumerate(ALGORITHMS):
        if algo == "tree" and n & (n - 1):
            continue  # halving-doubling needs a power-of-two n
        bw = [predict_all_reduce(s, n, algo, hw)["busbw"] / 1e9 for s in _SIZES]
        fig.add_trace(go.Scatter(x=_SIZES, y=bw, mode="lines", name=f"{algo} — predicted",
                                 line=dict(color=series_color(i), width=3 if algo == algorithm else 1.5),
                                 hovertemplate=f"{algo}<br>%{{x:.3s}}B<br>%{{y:.3g}} GB/s<extra></extra>"))
    if not (algorithm == "tree" and n & (n - 1)):
        p = predict_all_reduce(nbytes, n, algorithm, hw)
        fig.add_trace(go.Scatter(x=[nbytes], y=[p["busbw"] / 1e9], mode="markers", name="your message",
                                 marker=dict(size=12, color="black", symbol="diamond")))
    # The link's β as a trace, not add_hline(annotation_text=...): on a log axis plotly puts
    # that annotation at 10**y and the axis range explodes (labels up to 10^295).
    beta = cost.link_for_ranks(range(n), hw).beta
    fig.add_trace(go.Scatter(x=[_SIZES[0], _SIZES[-1]], y=[beta / 1e9] * 2, mode="lines",
                             name=f"link β = {beta / 1e9:.3g} GB/s",
                             line=dict(dash="dot", color="#888888"), hoverinfo="skip"))
    fig.update_layout(
        xaxis=dict(title="message size (bytes)", type="log"),
        yaxis=dict(title="bus bandwidth (GB/s)", type="log"),
    )
    return finish(fig, title=f"All-reduce bus bandwidth on {n} × {hw.name} — {PREDICTED}",
                  subtitle="busbw = 2(n−1)/n · bytes / time (nccl-tests); small messages "
                           "pay alpha, large ones approach beta", legend="right")


def describe_prediction(p: dict) -> str:
    """One line for a prediction from `predict_all_reduce`."""
    return (f"{p['algorithm']} all-reduce of {p['bytes'] / 2**20:.3g} MiB on {p['n']} × {p['profile']}: "
            f"{p['time_s'] * 1e6:,.1f} µs, bus bandwidth {p['busbw'] / 1e9:.3g} GB/s "
            f"(link α = {p['link']['alpha'] * 1e6:.3g} µs, β = {p['link']['beta'] / 1e9:.3g} GB/s; "
            f"latency is {p['latency_share']:.0%} of the time) — predicted")


def alpha_beta_explorer(*, nbytes: float = 16 * 2**20, n: int = 8, algorithm: str = "ring",
                        profile: str = "h100-nvlink"):
    """Sliders for message size and ranks, dropdowns for algorithm and profile; redraws at once."""
    size = w.FloatLogSlider(value=nbytes, base=2, min=10, max=31, step=0.25, description="bytes",
                            readout_format=".3s", continuous_update=False)
    ranks = w.IntSlider(value=n, min=2, max=64, description="ranks n", continuous_update=False)
    algo = w.Dropdown(options=list(ALGORITHMS), value=algorithm, description="algorithm")
    prof = w.Dropdown(options=list_profiles(), value=profile, description="profile")
    out = w.Output()

    def draw(_=None):
        if algo.value == "tree" and ranks.value & (ranks.value - 1):
            line = (f"tree (recursive halving-doubling) needs a power-of-two n; {ranks.value} is "
                    f"not — pick 2, 4, 8, 16, 32 or 64, or another algorithm.")
        else:
            line = describe_prediction(predict_all_reduce(size.value, ranks.value, algo.value, prof.value))
        show(out, line, plot_alpha_beta(size.value, ranks.value, algo.value, prof.value))

    for control in (size, ranks, algo, prof):
        control.observe(draw, names="value")
    display(w.VBox([w.HBox([size, ranks]), w.HBox([algo, prof]), out]))
    draw()
