"""Bytes and messages of context parallelism (ring attention) and expert parallelism (all-to-all).

Counted for the kit's implementations (`mgpukit.strategies.context_parallel`,
`mgpukit.strategies.expert_parallel`), per rank and per step, ``e`` bytes per element.

**Context parallelism** (Liu et al. 2023, ring attention), ``c`` ranks, each holding
``b`` sequences × ``s/c`` tokens per micro-batch; one K (or V) block is ``S = b·(s/c)·h·e``:

==========================  ============================  ===============
per attention layer         messages (point-to-point)     bytes sent
==========================  ============================  ===============
forward                     ``c − 1``                     ``(c − 1)·2S``
backward                    ``c``                         ``(c − 1)·4S + 2S``
==========================  ============================  ===============

(forward passes K and V around the ring; backward passes them again with the dK, dV
accumulated so far, then sends the finished dK, dV home). Megatron-Core passes the same
volume; what a ring step costs in time is ``α + bytes/β`` on the cp group's link, overlapped
with the block's attention when the compute is longer.

**Expert parallelism** (Lepikhin et al. 2020, GShard; Fedus et al. 2021, Switch), ``E`` experts
over ``p`` ranks, top-``k`` routing, capacity ``C = ⌈f·k·s/E⌉`` slots per expert per sequence
(``f`` the capacity factor; GShard's groups are the sequences here, so routing and dropping do
not depend on how sequences are spread over ranks). A rank dispatches a padded buffer of
``E·b·C`` tokens of width ``h``: ``D = E·b·C·h·e`` bytes. Per MoE layer and micro-batch:

==========================  ==============================  ====================
                            all-to-alls                     bytes sent per rank
==========================  ==============================  ====================
forward                     2 (dispatch, combine)           ``2·(p−1)/p·D``
backward                    2 (their transposes, reversed)  ``2·(p−1)/p·D``
==========================  ==============================  ====================

Each rank keeps its own ``1/p`` of the buffer (`comm.bus_factor("all_to_all", p)`).
"""
from __future__ import annotations

import math

from mgpukit.costmodel.comm import bus_factor


def ring_block_bytes(rows: int, seq_len: int, d_model: int, cp: int, *, elem: int = 4) -> int:
    """``S``: one rank's K (or V) block of ``rows`` sequences, ``seq_len / cp`` tokens each."""
    return rows * (seq_len // cp) * d_model * elem


def cp_messages(*, n_layer: int, cp: int, micro_batches: int = 1) -> dict[str, int]:
    """Ring messages one rank sends per step: ``{"fwd": …, "bwd": …}``."""
    if cp == 1:
        return {"fwd": 0, "bwd": 0}
    return {"fwd": micro_batches * n_layer * (cp - 1), "bwd": micro_batches * n_layer * cp}


def cp_bytes(*, rows: int, seq_len: int, d_model: int, n_layer: int, cp: int, micro_batches: int = 1,
             elem: int = 4) -> dict[str, float]:
    """Ring bytes one rank sends per step: ``{"fwd": …, "bwd": …, "total": …}`` (table above)."""
    if cp == 1:
        return {"fwd": 0.0, "bwd": 0.0, "total": 0.0}
    S = ring_block_bytes(rows, seq_len, d_model, cp, elem=elem)
    k = micro_batches * n_layer
    fwd, bwd = k * (cp - 1) * 2 * S, k * ((cp - 1) * 4 * S + 2 * S)
    return {"fwd": float(fwd), "bwd": float(bwd), "total": float(fwd + bwd)}


def expert_capacity(seq_len: int, n_expert: int, top_k: int, capacity_factor: float) -> int:
    """``C``: slots per expert per sequence, ``⌈f·k·s/E⌉`` (GShard §2.2; Switch eq. 4)."""
    return max(1, math.ceil(capacity_factor * top_k * seq_len / n_expert))


def dispatch_bytes(*, rows: int, seq_len: int, d_model: int, n_expert: int, top_k: int,
                   capacity_factor: float, elem: int = 4) -> int:
    """``D``: one rank's padded dispatch buffer, ``E·b·C·h·e`` bytes."""
    C = expert_capacity(seq_len, n_expert, top_k, capacity_factor)
    return n_expert * rows * C * d_model * elem


def ep_all_to_alls(*, n_moe_layers: int, micro_batches: int = 1) -> dict[str, int]:
    """All-to-alls one rank joins per step: 2 per MoE layer forward, 2 backward."""
    k = micro_batches * n_moe_layers
    return {"fwd": 2 * k, "bwd": 2 * k}


def ep_bytes(*, rows: int, seq_len: int, d_model: int, n_expert: int, top_k: int, capacity_factor: float,
             n_moe_layers: int, ep: int, micro_batches: int = 1, elem: int = 4) -> dict[str, float]:
    """All-to-all bytes one rank sends per step: ``{"fwd": …, "bwd": …, "total": …}``."""
    D = dispatch_bytes(rows=rows, seq_len=seq_len, d_model=d_model, n_expert=n_expert, top_k=top_k,
                       capacity_factor=capacity_factor, elem=elem)
    one = bus_factor("all_to_all", ep) * D
    k = micro_batches * n_moe_layers
    return {"fwd": 2 * k * one, "bwd": 2 * k * one, "total": 4 * k * one}
