"""The alpha-beta model's all-reduce bus bandwidth against message size (notebook 02's
explorer): one curve per algorithm, predicted — `mgpukit.studies.alpha_beta` computes the points.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.costmodel import comm as cost
from mgpukit.costmodel.hardware import load_profile
from mgpukit.studies.alpha_beta import ALGORITHMS, predict_all_reduce

from .layout import finish
from .style import PREDICTED, series_color

_SIZES = [2.0 ** (10 + k / 4) for k in range(0, 4 * 21 + 1)]  # 1 KiB .. 2 GiB


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
