"""Bytes each GPU sends per training step, by parallel dimension.

Ring collectives send ``(n-1)/n`` of the buffer per reduce-scatter or all-gather and twice
that per all-reduce (see :mod:`mgpukit.costmodel.comm`). Per step, for Ψ local parameters of
``e`` bytes and ``m`` micro-batches of ``b`` sequences:

* **data parallel** (Rajbhandari et al. 2020, ZeRO §7): plain DP all-reduces the gradients once,
  ``2(n-1)/n·Ψ·e``; ZeRO-1 reduce-scatters gradients and all-gathers updated parameters, the
  same volume; ZeRO-2 reduce-scatters every micro-batch (gradients are kept sharded);
  ZeRO-3 all-gathers parameters in forward and again in backward and reduce-scatters
  gradients, ``3(n-1)/n·Ψ·e`` per micro-batch (1.5× DP when ``m = 1``, the paper's figure).
* **tensor parallel** (Shoeybi et al. 2019, Megatron-LM §3): two all-reduces of the ``s·b·h``
  activations per layer in forward (``g`` after attention and after the MLP) and two in backward
  (``f``); full recomputation repeats the forward two. Sequence parallelism (Korthikanti et
  al. 2022) turns each all-reduce into an all-gather + reduce-scatter: same volume.
* **pipeline parallel** (Narayanan et al. 2021): each micro-batch sends its ``s·b·h`` output
  activation to the next stage and receives the gradient back; a middle stage sends one of each
  per micro-batch, ``v`` times more with interleaving. With tp > 1 it sends ``1/t`` of it (SP
  splits it anyway; without SP Megatron scatters it and all-gathers it inside the next node, §4.1).
* **context parallel** (ring attention, Liu et al. 2023): each layer passes this rank's K and V
  chunk ``cp - 1`` times forward, and K, V and their gradients backward (again forward when
  recomputing).
* **expert parallel** (GShard, Lepikhin et al. 2020): per MoE layer two all-to-alls forward and
  two backward (two more forward under full recomputation) of the padded dispatch buffer,
  :func:`mgpukit.costmodel.cp_ep.ep_bytes` (the formula's one home). The experts' gradients are
  synced over their ``dp`` copies, every other weight's over the ``dp·ep`` ranks of the data.
"""

from __future__ import annotations

from mgpukit.costmodel.comm import bus_factor
from mgpukit.costmodel.cp_ep import ep_bytes
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import stage_expert_params, stage_params
from mgpukit.costmodel.shapes import ModelShape


def tp_allreduces_per_layer(checkpointing: str) -> int:
    """All-reduces (or AG+RS pairs) per layer per micro-batch: 2 fwd + 2 bwd (+2 recomputed)."""
    return 6 if checkpointing == "full" else 4


def dp_collective_bytes(psi: float, layout: Layout, *, ranks: int | None = None) -> dict[str, float]:
    """Buffer sizes (bytes, the full unsharded buffer) of the data-parallel collectives per step,
    as counts × size: ``all_reduce``, ``reduce_scatter``, ``all_gather`` → (count, nbytes).
    ``ranks``: the group's size (default ``dp × cp``)."""
    nbytes = psi * layout.dtype_bytes
    m = layout.num_micro_batches
    if (layout.dp * layout.cp if ranks is None else ranks) == 1:  # cp ranks reduce their gradients too
        return {}
    if layout.zero == 0:
        return {"all_reduce": (1, nbytes)}
    if layout.zero == 1:
        return {"reduce_scatter": (1, nbytes), "all_gather": (1, nbytes)}
    if layout.zero == 2:
        return {"reduce_scatter": (m, nbytes), "all_gather": (1, nbytes)}
    return {"reduce_scatter": (m, nbytes), "all_gather": (2 * m, nbytes)}


def comm_bytes_per_step(shape: ModelShape, layout: Layout) -> dict[str, float]:
    """Bytes sent per GPU per step: ``dp``, ``tp``, ``pp``, ``cp``, ``ep`` and ``total`` (fullest
    stage). The gradients are reduced over dp × cp ranks (`steptime._dp_exposed`), × ep for the
    weights that are not experts."""
    held = {s: stage_params(shape, layout, s) for s in layout.distinct_stages(shape.n_layer)}
    stage = max(held, key=held.get)
    experts = stage_expert_params(shape, layout, stage)
    dp = 0.0
    dp_cp = layout.dp * layout.cp
    for psi, n in ((held[stage] - experts, dp_cp * layout.ep), (experts, dp_cp)):
        for kind, (count, nbytes) in dp_collective_bytes(psi, layout, ranks=n).items():
            dp += count * bus_factor(kind, n) * nbytes

    t, m = layout.tp, layout.num_micro_batches
    activation = shape.seq_len // layout.cp * layout.micro_batch * shape.d_model * layout.dtype_bytes
    layers = max(layout.layers_of_stage(shape.n_layer, s) for s in range(layout.pp))
    tp = m * layers * tp_allreduces_per_layer(layout.checkpointing) * bus_factor("all_reduce", t) * activation

    pp = 0.0
    if layout.pp > 1:  # 1/tp of the activation per hop (sequence parallel or Megatron's scatter/gather)
        pp = m * 2 * layout.v * activation / t

    cp = 0.0
    if layout.cp > 1:  # ring attention: cp-1 hops of this rank's K and V chunk per pass
        kv = 2 * shape.seq_len // layout.cp * layout.micro_batch * shape.kv_dim // t * layout.dtype_bytes
        passes = 1 + 2 + (1 if layout.checkpointing in ("full", "selective") else 0)  # fwd, bwd (K,V,dK,dV), recompute
        cp = m * layers * (layout.cp - 1) * passes * kv

    ep = 0.0
    if layout.ep > 1:
        a2a = ep_bytes(rows=layout.micro_batch, seq_len=shape.seq_len // layout.cp, d_model=shape.d_model,
                       n_expert=shape.n_expert, top_k=shape.top_k, capacity_factor=shape.capacity_factor,
                       n_moe_layers=layers, ep=layout.ep, micro_batches=m, elem=layout.dtype_bytes)
        ep = a2a["total"] + (a2a["fwd"] if layout.checkpointing == "full" else 0.0)
    return {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "total": dp + tp + pp + cp + ep}
