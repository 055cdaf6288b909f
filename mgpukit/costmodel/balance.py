"""Pipeline stages balanced by cost: how many layers each stage gets.

The slowest stage paces a pipeline (:mod:`mgpukit.costmodel.steptime`), and the stages are not
alike: the first also runs the embedding, the last the final norm, the output layer and the
loss — with a large vocabulary the last one is worth whole layers (a 7B-sized model with Llama
3's 128K vocabulary: ≈ 2.6 layers of GEMMs). Equal layer counts then leave every other stage waiting
for it, and a layer count that pp does not divide cannot be split evenly at all. Llama 3
"reduce[s] one Transformer layer each from the first and the last stages" (Dubey et al. 2024,
§3.3.2); BLOOM counts the tied embeddings as layers when it partitions (BigScience tr11 README:
``--pp-partition-method 'type:transformer|embedding'``: 5 + 6 × 10 + 5 on 12 stages).

:func:`balance_stages` does it by cost. Stage ``s`` with ``n_s`` layers is busy
``n_s · c + e_s`` per micro-batch (:func:`~mgpukit.costmodel.steptime.stage_cost_terms`:
``c`` one layer, ``e_s`` the embedding or head on the end stages, 0 in between). Minimising
``max_s (n_s · c + e_s)`` subject to ``Σ n_s = n_layer`` and ``n_s ≥ 1`` is water-filling:
hand the layers out one at a time, each to the stage whose cost after taking it is lowest —
greedy is optimal here because every stage's cost grows by the same step. With the interleaved
schedule every stage's count must be a multiple of ``v`` (the first and the last may be one
short: that chunk keeps only the embedding or the head, as in Llama 3), so the hand-out is in
units of ``v`` layers. Memory is not balanced here: the search checks every stage's.

Checked: for BLOOM 176B on its 12 stages this gives its published 5 + 6 × 10 + 5, and for Llama 3
405B (v = 8) its published 7 + 8 × 14 + 7 (tests/test_search.py).
"""
from __future__ import annotations

import heapq
from functools import lru_cache

from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.steptime import stage_cost_terms


def balance_stages(shape: ModelShape, layout: Layout, profile, *, framework=None) -> tuple[int, ...] | None:
    """Layers per pipeline stage minimising the slowest stage's busy time (module docstring);
    None when no split satisfies the schedule (interleaved: counts in units of ``v``)."""
    if layout.pp == 1:
        return (shape.n_layer,)
    c, first, last = stage_cost_terms(shape, layout, profile, framework=framework)
    v = layout.v if layout.schedule == "interleaved" else 1
    # costs in units of one layer, rounded so that nearby layouts share the cache
    return split_layers(shape.n_layer, layout.pp, round(first / c, 3), round(last / c, 3), v)


@lru_cache(maxsize=4096)
def split_layers(n_layer: int, pp: int, first: float, last: float, v: int = 1) -> tuple[int, ...] | None:
    """Water-filling of ``n_layer`` layers over ``pp`` stages whose fixed extra costs are ``first``
    and ``last`` (in layers); counts multiples of ``v``, the end stages may be one short."""
    best = None
    for short_first in (False, True) if v > 1 else (False,):
        for short_last in (False, True) if v > 1 else (False,):
            short = (short_first, *([False] * (pp - 2)), short_last)
            total = n_layer + sum(short)
            if total % v or total // v < pp:
                continue
            counts = _water_fill(total // v, pp, v, first, last, short)
            worst = max(_cost(counts[s], s, pp, first, last) for s in range(pp))
            if best is None or worst < best[0] - 1e-12:
                best = (worst, counts)
    return None if best is None else best[1]


def _cost(layers: int, stage: int, pp: int, first: float, last: float) -> float:
    return layers + (first if stage == 0 else 0.0) + (last if stage == pp - 1 else 0.0)


def _water_fill(units: int, pp: int, v: int, first: float, last: float, short) -> tuple[int, ...]:
    count = [1] * pp  # units of v layers; every stage at least one
    layers = lambda s: count[s] * v - short[s]  # noqa: E731

    heap = [(_cost(v * 2 - short[s], s, pp, first, last), s) for s in range(pp)]
    heapq.heapify(heap)
    for _ in range(units - pp):
        _, s = heapq.heappop(heap)
        count[s] += 1
        heapq.heappush(heap, (_cost(layers(s) + v, s, pp, first, last), s))
    return tuple(layers(s) for s in range(pp))
