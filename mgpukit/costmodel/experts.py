"""The mixture-of-experts terms of the cost model: what a MoE block's experts compute and how long
its all-to-alls take.

A MoE block (GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021) routes each token to
``top_k`` of ``E`` experts; each expert takes at most ``C = ⌈f·k·s/E⌉`` tokens of a sequence
(`cp_ep.expert_capacity`), so a sequence's dispatch buffer has ``E·C`` slots, computed whether
filled or padded. With expert parallelism each of ``ep`` ranks holds ``E/ep`` experts and
receives their slots from every rank of its ep group: two all-to-alls forward (dispatch,
combine), their two transposes backward, of `cp_ep.dispatch_bytes` each (the bytes' one home).
Used by :mod:`~mgpukit.costmodel.memory` (activations) and :mod:`~mgpukit.costmodel.steptime`
(the experts' grouped GEMM, the exposed all-to-alls); the parameters are
:func:`~mgpukit.costmodel.shapes.layer_expert_split`'s.
"""
from __future__ import annotations

from mgpukit.costmodel.comm import alltoall_time, group_link
from mgpukit.costmodel.cp_ep import dispatch_bytes, expert_capacity
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.profile import HardwareProfile
from mgpukit.costmodel.shapes import ModelShape


def expert_slots(shape: ModelShape) -> int:
    """Slots of one sequence's dispatch buffer, ``E·C``: what a MoE block's experts compute."""
    return shape.n_expert * expert_capacity(shape.seq_len, shape.n_expert, shape.top_k, shape.capacity_factor)


def moe_expert_rows(shape: ModelShape, layout: Layout) -> tuple[int, int]:
    """``(rows, experts)`` of one rank's grouped expert GEMM for one micro-batch: ``E/ep`` experts,
    each with ``C`` slots (`cp_ep.expert_capacity` of the rank's ``s/cp`` tokens) per sequence from
    each of the ``ep`` ranks — padded slots are computed too, as in GShard's dispatch."""
    C = expert_capacity(shape.seq_len // layout.cp, shape.n_expert, shape.top_k, shape.capacity_factor)
    return layout.ep * layout.micro_batch * C, shape.n_expert // layout.ep


def moe_alltoall_seconds(shape: ModelShape, layout: Layout, profile: HardwareProfile) -> float:
    """Seconds of one MoE layer's all-to-alls for one micro-batch, not overlapped: dispatch and
    combine forward, their transposes backward (again forward under full recomputation), each of
    `cp_ep.dispatch_bytes`' padded buffer (this rank's ``s/cp`` tokens) over the ep group — the
    node's NVLink while ``(ep − 1)·tp·cp`` stays inside a node, else the network. Each tp rank
    dispatches the whole buffer (no sequence split of the dispatch is modelled)."""
    if layout.ep == 1:
        return 0.0
    D = dispatch_bytes(rows=layout.micro_batch, seq_len=shape.seq_len // layout.cp, d_model=shape.d_model,
                       n_expert=shape.n_expert, top_k=shape.top_k, capacity_factor=shape.capacity_factor,
                       elem=layout.dtype_bytes)
    count = 4 + (2 if layout.checkpointing == "full" else 0)
    return count * alltoall_time(D, layout.ep, group_link(profile, layout.ep, stride=layout.tp * layout.cp))
