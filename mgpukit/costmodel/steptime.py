"""Predicted time of one training step: compute + exposed communication + pipeline bubble.

The model, per GPU of the slowest pipeline stage (the last: it also runs the logits):

1. **Compute.** A micro-batch's forward takes ``FLOPs / (tp · peak · efficiency)``; backward
   twice that; recomputation adds its extra forward (:mod:`mgpukit.costmodel.flops`).
2. **Tensor parallel** all-reduces sit on the critical path between matmuls and are not
   overlapped (Shoeybi et al. 2019): ``4`` per layer per micro-batch (6 with full recompute),
   and on the last stage the vocabulary-parallel head's and loss's (three small ones;
   `tensor_parallel.tp_collectives`) — a few percent of a tiny model's step, nothing at scale.
3. **Pipeline** sends: one activation forward and one gradient back per micro-batch and
   chunk, also not overlapped.
4. The stage's busy time per micro-batch ``t_mb`` (1-3) times ``m`` is stretched by the
   schedule's bubble: ``m·t_mb / (1 - bubble_fraction)`` (:mod:`mgpukit.costmodel.pipeline`).
5. **Data parallel** gradient sync is bucketed and overlapped with the backward of the last
   micro-batch (PyTorch DDP; Li et al. 2020, "PyTorch Distributed"), so only
   ``max(last bucket, sync - backward)`` is exposed. ZeRO-1's parameter all-gather after the
   optimizer step is exposed; ZeRO-2 reduce-scatters and ZeRO-3 gathers/scatters every
   micro-batch, overlapped with that micro-batch's forward/backward, one layer at a time.
6. **Optimizer** step (Adam): memory-bound, ~28 bytes moved per local parameter.

Communication times come from :mod:`mgpukit.costmodel.comm`, on the link each group spans.
MFU = model FLOPs (no recomputation) / (step time · GPUs · peak) (Chowdhery et al. 2022).
"""

from __future__ import annotations

from mgpukit.costmodel.comm import allgather_time, allreduce_time, group_link, p2p_time, reduce_scatter_time
from mgpukit.costmodel.flops import flops_per_step, layer_forward_flops, logits_forward_flops
from mgpukit.costmodel.hardware import HardwareProfile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import stage_params
from mgpukit.costmodel.pipeline import bubble_fraction
from mgpukit.costmodel.shapes import ModelShape, layer_param_split
from mgpukit.costmodel.tensor_parallel import tp_seconds_per_microbatch

ADAM_BYTES_PER_PARAM = 28  # read master, m, v, grad; write master, m, v, bf16/fp32 weight
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb=25


def _dp_exposed(shape, layout, profile, *, fwd, bwd, bucket_bytes) -> tuple[float, float, float]:
    """(exposed per micro-batch, exposed once at the end, total un-overlapped) DP comm seconds."""
    if layout.dp == 1:
        return 0.0, 0.0, 0.0
    link = group_link(profile, layout.dp, stride=layout.tp)
    n, e = layout.dp, layout.dtype_bytes
    nbytes = max(stage_params(shape, layout, s) for s in {0, layout.pp - 1}) * e
    split, replicated = layer_param_split(shape)
    layer_bytes = min(nbytes, (split / layout.tp + replicated) * e)
    bucket = min(bucket_bytes, nbytes)
    rs, ag = reduce_scatter_time(nbytes, n, link), allgather_time(nbytes, n, link)
    if layout.zero == 0:
        ar = allreduce_time(nbytes, n, link)
        return 0.0, max(allreduce_time(bucket, n, link), ar - bwd), ar
    if layout.zero == 1:
        return 0.0, max(reduce_scatter_time(bucket, n, link), rs - bwd) + ag, rs + ag
    if layout.zero == 2:
        per_mb = max(reduce_scatter_time(bucket, n, link), rs - bwd)
        return per_mb, ag, layout.num_micro_batches * rs + ag
    # ZeRO-3: gather in forward, gather again + reduce-scatter in backward; the first layer's
    # gather and the last layer's reduce-scatter cannot hide behind compute.
    per_mb = (max(allgather_time(layer_bytes, n, link), ag - fwd)
              + max(reduce_scatter_time(layer_bytes, n, link), ag + rs - bwd))
    return per_mb, 0.0, layout.num_micro_batches * (2 * ag + rs)


def step_time(
    shape: ModelShape, layout: Layout, profile: HardwareProfile, *,
    bucket_bytes: float = DDP_BUCKET_BYTES, overlap_dp: bool = True,
) -> dict[str, float]:
    """Predicted seconds of one step (module docstring). Returns ``compute_s``, ``comm_s``
    (exposed; split as ``comm_tp_s``, ``comm_pp_s``, ``comm_dp_s``), ``bubble_s``,
    ``optimizer_s``, ``total_s``, ``bubble_fraction``, ``mfu``, ``hfu`` and ``tokens_per_s``.

    ``overlap_dp=False`` exposes the whole data-parallel sync (a naive all-reduce after backward).
    """
    peak = profile.flops(layout.dtype)
    rate = peak * profile.compute_efficiency
    t, p, m, b = layout.tp, layout.pp, layout.num_micro_batches, layout.micro_batch
    layers = shape.n_layer // p

    # 1. compute of one micro-batch on the last stage
    tokens = b * shape.seq_len
    layer = layer_forward_flops(shape, tokens)
    fwd = (layers * (layer["linear"] + layer["attention"]) + logits_forward_flops(shape, tokens)) / t / rate
    bwd = 2 * fwd
    recompute = {"none": 0.0, "selective": layers * layer["attention"],
                 "full": layers * (layer["linear"] + layer["attention"])}[layout.checkpointing] / t / rate

    # 2-3. tensor- and pipeline-parallel communication of one micro-batch
    activation = tokens * shape.d_model * layout.dtype_bytes
    tp_s = tp_seconds_per_microbatch(shape, layout, group_link(profile, t), stage=p - 1)
    pp_s = 0.0
    if p > 1:
        pp_link = group_link(profile, 2, stride=t * layout.dp)  # neighbouring stages
        pp_s = 2 * layout.v * p2p_time(activation / (t if layout.sp else 1), pp_link)

    # 5. data-parallel gradient sync
    dp_mb, dp_end, dp_total = _dp_exposed(shape, layout, profile, fwd=fwd, bwd=bwd + recompute,
                                          bucket_bytes=bucket_bytes)
    if not overlap_dp:
        dp_mb, dp_end = 0.0, dp_total

    # 4. the pipeline stretches the stage's busy time by its bubble
    t_mb = fwd + bwd + recompute + tp_s + pp_s + dp_mb
    frac = bubble_fraction(layout.schedule, p, m, layout.v)
    busy = m * t_mb
    pipeline = busy / (1 - frac)

    # 6. optimizer step over the local (possibly ZeRO-sharded) parameters
    psi = max(stage_params(shape, layout, s) for s in {0, p - 1})
    optimizer_s = ADAM_BYTES_PER_PARAM * psi / (layout.dp if layout.zero >= 1 else 1) / profile.memory_bandwidth

    total = pipeline + dp_end + optimizer_s
    flops = flops_per_step(shape, layout.global_batch, checkpointing=layout.checkpointing)
    gpus = layout.world_size
    return {
        "compute_s": m * (fwd + bwd + recompute),
        "comm_s": m * (tp_s + pp_s + dp_mb) + dp_end,
        "comm_tp_s": m * tp_s,
        "comm_pp_s": m * pp_s,
        "comm_dp_s": m * dp_mb + dp_end,
        "bubble_s": pipeline - busy,
        "optimizer_s": optimizer_s,
        "total_s": total,
        "bubble_fraction": frac,
        "mfu": flops["model"] / (total * gpus * peak),
        "hfu": flops["total"] / (total * gpus * peak),
        "tokens_per_s": layout.global_batch * shape.seq_len / total,
    }
