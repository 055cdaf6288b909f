"""Notebook 11's picture of context parallelism's load balance (`mgpukit.strategies.context_parallel`).

Causal attention over a sequence cut into 2·cp chunks is a lower triangle of chunk pairs (query
chunk × key chunk): a chunk attends to itself (a diagonal block, half of it masked) and to every
chunk before it. Rank i holds query chunks i and 2·cp − 1 − i — Megatron-Core's and torchtitan's
layout — so every rank computes the same number of pairs; contiguous slices would give the last
rank several times the first's work.
"""
from __future__ import annotations

import plotly.graph_objects as go

from mgpukit.plots.layout import finish
from mgpukit.plots.style import series_color


def chunk_owner(cp: int) -> list[int]:
    """The rank holding each of the 2·cp chunks: i and 2·cp − 1 − i belong to rank i."""
    return [c if c < cp else 2 * cp - 1 - c for c in range(2 * cp)]


def plot_cp_blocks(cp: int) -> go.Figure:
    """Each computed chunk pair coloured by the rank that computes it; masked pairs left blank."""
    owner, n = chunk_owner(cp), 2 * cp
    fig = go.Figure()
    for r in range(cp):
        pairs = [(q, k) for q in range(n) for k in range(q + 1) if owner[q] == r]
        fig.add_scatter(x=[f"K{k}" for _, k in pairs], y=[f"Q{q}" for q, _ in pairs], mode="markers",
                        name=f"rank {r}: {len(pairs)} pairs", marker=dict(symbol="square", size=34,
                                                                          color=series_color(r)),
                        hovertemplate=f"rank {r}: query %{{y}} × key %{{x}}<extra></extra>")
    chunks = [f"K{k}" for k in range(n)]
    fig.update_layout(xaxis=dict(title="key chunk", categoryorder="array", categoryarray=chunks, side="top"),
                      yaxis=dict(title="query chunk", categoryorder="array",
                                 categoryarray=[f"Q{q}" for q in range(n)][::-1]))
    return finish(fig, title=f"Causal ring attention, cp = {cp}: who computes which chunk pair",
                  subtitle=f"{n} chunks; rank i holds chunks i and {n - 1} − i, so every rank computes "
                           "the same number of pairs (blank: masked, never computed)", plot_height=60 * n)
