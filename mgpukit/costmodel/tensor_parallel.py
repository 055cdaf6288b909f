"""Every collective one tensor-parallel step issues, and the bytes each rank sends.

Counted for the kit's Megatron-style implementation (`mgpukit.strategies.tensor_parallel`),
per micro-batch of ``b`` sequences of ``s`` tokens, activations ``A = b·s·h·e`` bytes:

=====================  ==========================  ===================================
where                  tp                          tp with sequence parallelism
=====================  ==========================  ===================================
each block, forward    2 all-reduce (A)            2 all-gather + 2 reduce-scatter (A)
each block, backward   2 all-reduce (A)            2 reduce-scatter + 2 all-gather (A)
embedding              1 all-reduce fwd            1 reduce-scatter fwd, 1 all-gather bwd
output layer input     1 all-reduce bwd            1 all-gather fwd, 1 reduce-scatter bwd
vocab-parallel loss    all-reduce MAX (b·s·e), all-reduce SUM (2·b·s·e), forward only
per step (not per mb)  —                           1 all-reduce of the replicated params'
                                                   gradients (norms, row biases, positions)
=====================  ==========================  ===================================

The blocks' share is the cost model's ``tp`` term (`volume.comm_bytes_per_step`,
Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2: the same volume with SP). Bytes per
rank are ring bytes: ``2(t-1)/t`` of the buffer for an all-reduce, ``(t-1)/t`` of the full
buffer for a reduce-scatter or all-gather (`comm.bus_factor`).
"""
from __future__ import annotations

from mgpukit.costmodel.comm import bus_factor
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import ModelShape, layer_param_split


def tp_collectives(shape: ModelShape, layout: Layout, *, seq_len: int | None = None,
                   stage: int | None = None) -> dict[str, list]:
    """``{kind: [(count, nbytes), …]}`` of one step on one rank of the tp group.

    ``stage``: on a rank of pipeline stage ``stage`` (of ``layout.pp``) only — its
    ``n_layer / pp`` blocks, the embedding on the first stage, the head and the loss on the
    last (hybrid 3D). None: the whole model on every tp rank."""
    s = seq_len or shape.seq_len
    e, b, m = layout.dtype_bytes, layout.micro_batch, layout.num_micro_batches
    first = last = True
    L = shape.n_layer
    if stage is not None:
        first, last, L = stage == 0, stage == layout.pp - 1, shape.n_layer // layout.pp
    act = b * s * shape.d_model * e
    ends = int(first) + int(last)  # the embedding's g (first stage), the head's f (last stage)
    loss = [(m, b * s * e), (m, 2 * b * s * e)] if last else []  # MAX, then the two sums together
    if not layout.sp:
        return {"all_reduce": [(m * (4 * L + ends), act)] + loss}
    _, replicated = layer_param_split(shape)
    sp_params = (L * replicated + (2 * shape.d_model if last else 0)
                 + (shape.seq_len * shape.d_model if first else 0))  # + ln_f, positions
    return {"all_gather": [(m * (4 * L + ends), act)], "reduce_scatter": [(m * (4 * L + ends), act)],
            "all_reduce": loss + [(1, sp_params * 4)]}  # gradients stay fp32


def tp_bytes_per_step(shape: ModelShape, layout: Layout, **kw) -> float:
    """Bytes one tp rank sends per step (ring bytes), over every collective of `tp_collectives`."""
    return sum(count * bus_factor(kind, layout.tp) * nbytes
               for kind, items in tp_collectives(shape, layout, **kw).items() for count, nbytes in items)


def tp_block_bytes_per_step(shape: ModelShape, layout: Layout) -> float:
    """The blocks' share alone: ``4·L`` all-reduces (or AG + RS pairs) of the activations per
    micro-batch — the term the step-time model charges to tensor parallelism."""
    act = layout.micro_batch * shape.seq_len * shape.d_model * layout.dtype_bytes
    return layout.num_micro_batches * 4 * shape.n_layer * bus_factor("all_reduce", layout.tp) * act


