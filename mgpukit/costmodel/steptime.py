"""Predicted time of one training step: kernels + exposed communication + pipeline bubble.

The model, per GPU of each pipeline stage, for one micro-batch of ``b`` sequences
(``n = b · seq_len / cp`` tokens on this GPU):

1. **GEMMs**, one by one, on the roofline with tile and wave quantisation
   (:mod:`mgpukit.costmodel.kernels`). Per layer: q/k/v (one fused GEMM, or three where the
   model has three projections: ``ModelShape.fused_qkv``, False for mgpukit's GPT), o, fc1
   (gate/up), fc2, split by tensor parallelism as Megatron does (Shoeybi et al. 2019); backward
   runs two GEMMs per linear (``dX = dY·Wᵀ`` and ``dW = Xᵀ·dY``, a different shape: ``k`` is the
   token count). The attention core: with ``flash_attention`` one fused kernel per direction
   (Dao et al. 2022; backward recomputes the scores: 2.5× the forward FLOPs), charged as the
   emulator charges SDPA (`kernels.attention_seconds`: the profile's ``[attention]`` table,
   the causal tiles skipped, at the rate of the run's kernel generation, ``Layout.attention_kernel``:
   :mod:`~mgpukit.costmodel.attention_kernels`); without it the batched
   ``Q·Kᵀ`` and ``A·V`` GEMMs of Megatron-LM 2021 (two each in backward) with the ``s×s``
   scores in HBM. Once per model: the vocabulary-parallel ``lm_head``.
2. **Memory-bound kernels** charged by bytes / HBM bandwidth: the two norms, the MLP's
   bias+activation, bias+dropout+residual (fused, as in Megatron), their backward, the
   non-flash softmax and attention dropout over ``s×s`` scores, the loss over the vocabulary,
   the embedding, and the accumulation of each micro-batch's weight gradients into the fp32
   main gradients (read + write 4 bytes + read the half-precision gradient, per parameter).
   The norms, dropouts and residuals act on activations replicated across the tp group unless
   sequence parallelism splits them (Korthikanti et al. 2022).
3. **Recomputation**: ``full`` repeats every layer's forward (GEMMs and memory kernels) in
   backward; ``selective`` repeats the attention core (free with flash attention, whose
   backward recomputes the scores anyway).
4. **Tensor parallel** collectives: 4 per layer per micro-batch (6 with full recomputation),
   exposed (Megatron-LM), or with ``tp_overlap`` hidden behind the layer's GEMMs
   (exposed = ``max(0, comm − GEMMs)`` per layer; Wang et al. 2022, "Overlap communication
   with dependent computation via decomposition"; Megatron-Core ``--tp-comm-overlap``).
5. **Context parallel** (ring attention, Liu et al. 2023): ``cp − 1`` steps per layer, each
   passing a K and V chunk to the next rank (forward) or K, V, dK, dV (backward) while the
   attention core of the chunk it holds runs; exposed per step = ``max(0, p2p − core / cp)``.
   **Expert parallel** (a MoE block; GShard, Lepikhin et al. 2020): the experts' GEMMs run on
   their dispatched slots (``E/ep`` experts × ``ep·b·C`` slots, one grouped GEMM), the router
   on the tokens; two all-to-alls forward and two backward per layer on the ep group's link,
   exposed (:func:`~mgpukit.costmodel.experts.moe_alltoall_seconds`; the bytes are `cp_ep`'s).
   The experts' gradients sync over their ``dp`` copies, the rest over ``dp·ep`` (item 8).
6. **Pipeline** sends: one activation forward and one gradient back per micro-batch and chunk,
   not overlapped — except where the framework overlaps the interleaved schedule's sends with
   the next chunk's compute (``Framework.overlap_p2p``: Megatron-Core's ``overlap_p2p_comm``):
   exposed per hop = ``max(0, hop − chunk)``, the chunk's forward (or backward) seconds. With tp > 1 the message is ``1/tp`` of the activation and an all-gather
   inside the node restores it (Narayanan et al. 2021, §4.1 "scatter/gather"; with sequence
   parallelism the activation is split anyway).
7. **Pipeline schedule** with per-stage busy time ``t_s`` per micro-batch (stages may hold
   different layer counts, ``Layout.stage_layers``): ``m · max_s t_s`` for the steady state
   plus the fill and drain ``k · (Σ_s t_s − max_s t_s)``, with ``k = 1`` (GPipe, 1F1B),
   ``1/v`` (interleaved), ``1/3`` (ZB-H1), ``m`` (naive). For equal stages this is exactly
   :func:`~mgpukit.costmodel.pipeline.bubble_fraction`'s table; the slowest stage sets the pace.
8. **Data parallel** gradient sync (over the ``dp · cp`` ranks that hold the same weights) is bucketed and overlapped with the backward (PyTorch DDP;
   Li et al. 2020), so only ``max(last bucket, sync − backward)`` is exposed
   (``overlap_dp=False``: all of it, after the pipeline flush, as Megatron-LM 2021 did).
   ZeRO-1's parameter all-gather after the optimizer step is exposed; ZeRO-2 reduce-scatters
   every micro-batch behind its backward; ZeRO-3/FSDP prefetches layer by layer: each layer's
   all-gather (and in backward its reduce-scatter) hides behind the compute of the layer next
   to it, exposed = ``max(0, comm − compute)`` per layer, plus the first gather and the last
   reduce-scatter, which nothing hides.
9. **Optimizer** (Adam, mixed precision): memory-bound, 28 bytes moved per local parameter
   (read fp32 master, m, v, grad; write master, m, v, the half-precision weight).
10. **Sustained power** (the planner's convention, off for comparisons with the emulator):
    GEMMs streamed for seconds run at the board's power limit, a ceiling on FLOP/s measured on
    the profile's GPU (``[gemm] sustained``, `kernels.at_sustained_power`).
11. **Interference** (the planner's convention, off for comparisons with the emulator): a hidden
    collective is not free — its kernels share the SMs and HBM with the compute it hides behind,
    which slows by :data:`OVERLAP_SLOWDOWN` (18.9 %, a measured average, arXiv:2507.03114) for
    the hidden seconds of the data-parallel sync and, with ``tp_overlap``, of the tensor-parallel
    collectives (the paper's steps overlap both kinds). Not charged for cp's ring (its p2p sends
    use copy engines or few SMs; not measured).

Items 1–3 (one layer's kernels, the embedding's and the head's) live in
:mod:`mgpukit.costmodel.layer_kernels`; this module adds the communication, the schedule and the
optimizer. Communication times come from :mod:`mgpukit.costmodel.comm`, on the link each group spans
(rank order tp, cp, dp, pp). MFU = model FLOPs (no recomputation) / (step · GPUs · peak)
(Chowdhery et al. 2022); HFU counts recomputation. Checked against Megatron-LM's published
runs in :mod:`mgpukit.costmodel.published`.
"""

from __future__ import annotations

from dataclasses import replace

from mgpukit.costmodel.comm import allgather_time, allreduce_time, group_link, p2p_time, reduce_scatter_time
from mgpukit.costmodel.experts import moe_alltoall_seconds
from mgpukit.costmodel.fleet import slowest_fraction
from mgpukit.costmodel.flops import flops_per_step
from mgpukit.costmodel.frameworks import get_framework
from mgpukit.costmodel.profile import HardwareProfile
from mgpukit.costmodel.host import host_seconds
from mgpukit.costmodel.kernels import memory_seconds
from mgpukit.costmodel.layer_kernels import _ends, _kernel_of, _layer_kernels, _sustained
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import stage_expert_params, stage_params
from mgpukit.costmodel.shapes import ModelShape, layer_expert_split, layer_param_split
from mgpukit.costmodel.volume import tp_allreduces_per_layer

# Compute slows by this fraction while a collective overlaps it: measured average 18.9 % (max 40 %) over
# GPT and Llama training steps on A100 and H100 (and MI250/MI210): "Characterizing Compute-Communication
# Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power Implications" (2025),
# arXiv:2507.03114, abstract. The mechanism: NCCL's kernels hold SMs (an H100 all-gather
# launched 24 blocks beside a 132-block GEMM, pushing it into a second wave: NVIDIA developer forum,
# "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of Tail Effect").
OVERLAP_SLOWDOWN = 0.189
ADAM_BYTES_PER_PARAM = 28  # read master, m, v, grad; write master, m, v, bf16/fp32 weight
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb=25
FILL_FACTOR = {"gpipe": 1.0, "1f1b": 1.0, "zb-h1": 1.0 / 3}  # interleaved: 1/v; naive: m



def _dp_exposed(shape, layout, profile, *, fwd, bwd, layer_fwd, layer_bwd, layers,
                bucket_bytes, experts: bool = False) -> tuple[float, float, float]:
    """(exposed per micro-batch, exposed once at the end, total un-overlapped) DP comm seconds.

    The cp ranks of a replica hold the same weights (each saw other tokens), so the gradients are
    reduced, and ZeRO shards, over dp × cp ranks: Megatron-Core's DDP and distributed optimizer use
    the "intra_dp_cp_group" (module megatron.core.optimizer), torchtitan's FSDP the dp_shard_cp
    mesh. Every weight but the experts syncs over the ``dp·cp·ep`` ranks of the data (rank order tp,
    cp, ep, dp, pp: stride ``tp``); ``experts=True``: a rank's experts over their ``dp·cp`` copies
    (DeepSpeed-MoE's expert-data-parallel group; its link is taken at stride ``tp·ep``, exact when
    cp or ep is 1 — otherwise the group is two strided runs)."""
    n, e = layout.dp * layout.cp * (1 if experts else layout.ep), layout.dtype_bytes
    stages = layout.distinct_stages(shape.n_layer)
    if shape.n_expert == 1:  # dense: every weight is "the rest"
        held = 0.0 if experts else max(stage_params(shape, layout, s) for s in stages)
    else:
        held = max(stage_expert_params(shape, layout, s) if experts
                   else stage_params(shape, layout, s) - stage_expert_params(shape, layout, s) for s in stages)
    if n == 1 or held == 0:
        return 0.0, 0.0, 0.0
    link = group_link(profile, n, stride=layout.tp * (layout.ep if experts else 1))
    nbytes = held * e
    split, replicated = layer_expert_split(shape) if experts else layer_param_split(shape)
    layer_bytes = min(nbytes, (split / layout.tp + replicated) / (layout.ep if experts else 1) * e)
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
    # ZeRO-3 / FSDP: layer i+1's gather is prefetched while layer i computes, in forward and in
    # backward (where layer i's reduce-scatter also runs); the first gather and the last
    # reduce-scatter have nothing to hide behind.
    ag_l, rs_l = allgather_time(layer_bytes, n, link), reduce_scatter_time(layer_bytes, n, link)
    hidden = max(layers - 1, 0)
    per_mb = (ag_l + hidden * max(0.0, ag_l - layer_fwd)
              + ag_l + hidden * max(0.0, ag_l + rs_l - layer_bwd) + rs_l)
    return per_mb, 0.0, layout.num_micro_batches * (2 * ag + rs)


def _stage(shape, layout, profile, stage: int, kernels: dict, *, scatter_gather: bool = True,
           autocast: bool = False, overlap_p2p: bool = False) -> dict[str, float]:
    """Busy seconds of one micro-batch on one GPU of pipeline ``stage``, by part."""
    p, t, e = layout.pp, layout.tp, layout.dtype_bytes
    layers = layout.layers_of_stage(shape.n_layer, stage)
    ends = _ends(shape, layout, profile, embed=stage == 0, head=stage == p - 1, autocast=autocast)
    k = kernels
    # recomputation in backward: the whole layer's forward, or (selective) the attention core's,
    # which flash attention's backward already recomputes (counted in its 2.5×)
    selective = 0.0 if layout.flash_attention else 1.0
    recompute_gemm = {"none": 0.0, "selective": selective * k["attn_gemm_fwd"], "full": k["gemm_fwd"]}[layout.checkpointing]
    recompute_mem = {"none": 0.0, "selective": selective * k["attn_mem_fwd"], "full": k["mem_fwd"]}[layout.checkpointing]
    gemm = layers * (k["gemm_fwd"] + k["gemm_bwd"] + recompute_gemm) + ends["gemm_fwd"] + ends["gemm_bwd"]
    # accumulate this micro-batch's weight gradients into the fp32 main gradients
    accum = stage_params(shape, layout, stage) * ((e + 8) if layout.dtype != "fp32" else 12)
    mem = (layers * (k["mem_fwd"] + k["mem_bwd"] + recompute_mem) + ends["mem_fwd"] + ends["mem_bwd"]
           + memory_seconds(accum, profile))

    # tensor parallel: 4 (6) collectives per layer; overlapped they hide behind the layer's GEMMs
    tokens = layout.micro_batch * shape.seq_len // layout.cp
    activation = tokens * shape.d_model * e
    tp_link = group_link(profile, t)
    tp_layer = tp_allreduces_per_layer(layout.checkpointing) * allreduce_time(activation, t, tp_link)
    tp_raw = layers * tp_layer  # before any overlap: what is hidden is interference's to charge
    if layout.tp_overlap:
        tp_layer = max(0.0, tp_layer - (k["gemm_fwd"] + k["gemm_bwd"] + recompute_gemm))
    tp_s = layers * tp_layer
    if t > 1:  # the vocabulary-parallel ends (`tensor_parallel.tp_collectives`): the embedding's
        # all-reduce on the first stage; the head's and the loss's (MAX, then the two sums) on the last
        tp_ends = (int(stage == 0) + int(stage == p - 1)) * allreduce_time(activation, t, tp_link)
        if stage == p - 1:
            tp_ends += sum(allreduce_time(n * tokens * e, t, tp_link) for n in (1, 2))
        tp_raw += tp_ends
        if layout.tp_overlap:  # behind the embedding's and the head's own GEMMs
            tp_ends = max(0.0, tp_ends - (ends["gemm_fwd"] + ends["gemm_bwd"]))
        tp_s += tp_ends

    # context parallel: ring attention, cp - 1 p2p steps per pass, each behind a 1/cp of the core
    cp_s = 0.0
    if layout.cp > 1:
        cp_link = group_link(profile, layout.cp, stride=t)
        kv = 2 * tokens * shape.kv_dim // t * e  # this rank's K and V chunk
        passes = [(kv, k["attn_fwd"]), (2 * kv, k["attn_bwd"])]
        if layout.checkpointing in ("full", "selective"):
            passes.append((kv, k["attn_fwd"]))
        steps = sum(max(0.0, p2p_time(nbytes, cp_link) - core / layout.cp) for nbytes, core in passes)
        cp_s = layers * (layout.cp - 1) * steps

    ep_s = layers * moe_alltoall_seconds(shape, layout, profile) if layout.ep > 1 else 0.0
    fwd = layers * (k["gemm_fwd"] + k["mem_fwd"]) + ends["gemm_fwd"] + ends["mem_fwd"]
    bwd = (layers * (k["gemm_bwd"] + k["mem_bwd"] + recompute_gemm + recompute_mem)
           + ends["gemm_bwd"] + ends["mem_bwd"])

    pp_s = 0.0
    if p > 1:  # neighbouring stages; 1/tp of the activation, all-gathered inside the tp group
        pp_link = group_link(profile, 2, stride=t * layout.cp * layout.ep * layout.dp)
        if layout.sp or scatter_gather:
            hop = p2p_time(activation / t, pp_link) + (0.0 if layout.sp else allgather_time(activation, t, tp_link))
        else:  # the framework sends the whole activation from every tp rank (frameworks.Framework)
            hop = p2p_time(activation, pp_link)
        pp_s = 2 * layout.v * hop
        if overlap_p2p and layout.schedule == "interleaved":  # each hop beside a chunk's compute
            v = layout.v
            pp_s = v * (max(0.0, hop - fwd / v) + max(0.0, hop - bwd / v))
    return {"gemm": gemm, "mem": mem, "tp": tp_s, "tp_hidden": tp_raw - tp_s, "cp": cp_s, "ep": ep_s, "pp": pp_s,
            "layers": layers, "fwd": fwd, "bwd": bwd}


def step_time(
    shape: ModelShape, layout: Layout, profile: HardwareProfile, *,
    bucket_bytes: float = DDP_BUCKET_BYTES, overlap_dp: bool | None = None, framework=None,
    interference: float = 0.0, gpu_spread: float = 0.0, sustained: bool = False, autocast: bool | None = None,
) -> dict[str, float]:
    """Predicted seconds of one step (module docstring). Returns ``compute_s`` (GEMMs),
    ``memory_s`` (memory-bound kernels), ``comm_s`` (exposed; split as ``comm_tp_s``,
    ``comm_cp_s``, ``comm_ep_s``, ``comm_pp_s``, ``comm_dp_s``), ``bubble_s``, ``optimizer_s``, ``total_s``,
    ``bubble_fraction``, ``mfu``, ``hfu``, ``tokens_per_s`` and ``slowest_stage``; compute,
    memory and comm are the slowest stage's over the ``m`` micro-batches.

    ``framework`` (:class:`~mgpukit.costmodel.frameworks.Framework` or its name; default
    Megatron-Core) sets the dp-sync convention, the pipeline's scatter/gather and the kernels'
    efficiency. ``overlap_dp=False`` exposes the whole data-parallel sync (after the pipeline
    flush) whatever the framework says; True overlaps it. MFU of fp8 layouts is against the
    bf16 peak (the convention of torchtitan and of Llama 3's "BF16 MFU").

    ``interference``: the fraction by which compute slows while a hidden collective runs beside
    it (its kernels hold SMs and HBM bandwidth): the data-parallel sync this model hides behind
    the backward costs ``interference ·`` its hidden seconds (``interference_s``). 0 (the
    default) is the convention of the emulator, whose clocks do not model it; the planner uses
    :data:`OVERLAP_SLOWDOWN`.

    ``gpu_spread``: the spread of GPU matmul speeds across the fleet (a fraction; a profile's
    ``gpu_spread``): the slowest of the layout's GPUs paces the step, so the GEMM seconds on the
    pipeline's critical path are longer by :func:`~mgpukit.costmodel.fleet.slowest_fraction`
    (``straggler_s``; :mod:`~mgpukit.costmodel.fleet`). 0 (the default): every GPU as fast as the
    profile's rate — the emulator's convention, and the A100 profiles', whose rate was read off
    whole runs.

    ``sustained``: the GPUs run GEMMs back to back for seconds, at their power limit, so the
    profile's measured ceiling on FLOP/s (``[gemm] sustained``; `kernels.at_sustained_power`)
    holds for every tensor-core GEMM. False (the default): the rate of a short burst — the
    emulator's convention; the planner uses True.

    ``autocast``: 16-bit layouts run under ``torch.autocast`` with fp32 weights (fp32 residual
    stream and norms, a cast per linear input, fp32 loss: :func:`_autocast_bytes`) instead of
    16-bit throughout (Megatron's convention); None: the framework's ``autocast``.
    """
    fw = get_framework(framework)
    autocast = fw.autocast if autocast is None else autocast
    overlap_dp = fw.overlap_dp if overlap_dp is None else overlap_dp
    profile = _kernel_of(fw.on(profile), layout.attention_kernel)
    if sustained:
        profile = _sustained(profile)
    peak = profile.flops("bf16" if layout.dtype == "fp8" else layout.dtype)
    p, m = layout.pp, layout.num_micro_batches
    kernels = _layer_kernels(shape, layout, profile, autocast)
    memo: dict = {}  # a stage's cost depends only on its layer count and whether it holds an end

    def stage(s: int) -> dict:
        key = (layout.layers_of_stage(shape.n_layer, s), s == 0, s == p - 1)
        if key not in memo:
            memo[key] = _stage(shape, layout, profile, s, kernels, scatter_gather=fw.pp_scatter_gather,
                               autocast=autocast, overlap_p2p=fw.overlap_p2p)
        return memo[key]

    stages = [stage(s) for s in range(p)]

    slow_i = max(range(p), key=lambda s: _busy(stages[s]))
    slow = stages[slow_i]
    layer_fwd = kernels["gemm_fwd"] + kernels["mem_fwd"]
    layer_bwd = kernels["gemm_bwd"] + kernels["mem_bwd"]
    dp_mb, dp_end, dp_total = _dp_exposed(shape, layout, profile, fwd=slow["fwd"], bwd=slow["bwd"],
                                          layer_fwd=layer_fwd, layer_bwd=layer_bwd, layers=slow["layers"],
                                          bucket_bytes=bucket_bytes)
    if shape.n_expert > 1:  # the experts' own sync over their copies, after the rest's on the same links
        more = _dp_exposed(shape, layout, profile, fwd=slow["fwd"], bwd=slow["bwd"], layer_fwd=layer_fwd,
                           layer_bwd=layer_bwd, layers=slow["layers"], bucket_bytes=bucket_bytes, experts=True)
        dp_mb, dp_end, dp_total = dp_mb + more[0], dp_end + more[1], dp_total + more[2]
    if not overlap_dp:
        dp_mb, dp_end = 0.0, dp_total
    hidden_dp = max(0.0, dp_total - (m * dp_mb + dp_end))

    # the pipeline: the slowest stage paces the steady state; fill and drain by the schedule
    busy = [_busy(st) + dp_mb for st in stages]
    fill = 1.0 / layout.v if layout.schedule == "interleaved" else (
        float(m) if layout.schedule == "naive" else FILL_FACTOR[layout.schedule])
    steady = m * busy[slow_i]
    pipeline = steady + fill * (sum(busy) - busy[slow_i])
    # the slowest of the world's GPUs paces every stage: its GEMMs (matmuls, fused attention) run
    # slower by the fleet's expected worst; the critical path's GEMM seconds are paced the same way
    gemm_path = m * stages[slow_i]["gemm"] + fill * (sum(st["gemm"] for st in stages) - stages[slow_i]["gemm"])
    straggler_s = slowest_fraction(layout.world_size, gpu_spread) * gemm_path
    pipeline += straggler_s

    # optimizer step over the local (possibly ZeRO-sharded) parameters
    # (experts sharded over their dp·cp copies, the rest over dp·cp·ep)
    def local(s):
        experts = stage_expert_params(shape, layout, s)
        return (stage_params(shape, layout, s) - experts) / (layout.dp * layout.cp * layout.ep) + experts / (layout.dp * layout.cp)

    psi = max(stage_params(shape, layout, s) for s in layout.distinct_stages(shape.n_layer))
    sharded = psi / (layout.dp * layout.cp if layout.zero >= 1 else 1)
    if shape.n_expert > 1 and layout.zero >= 1:
        sharded = max(map(local, layout.distinct_stages(shape.n_layer)))
    optimizer_s = ADAM_BYTES_PER_PARAM * sharded / profile.memory_bandwidth
    if layout.dtype == "fp8":  # the weights cast to fp8 once per step (Transformer Engine caches them over micro-batches)
        optimizer_s += memory_seconds(3 * psi, profile)

    # the host (one convention with the emulator and `gpt_step`): each stage's host issues its
    # micro-batches' ops back to back and does not wait for its neighbours (a recv is a stream
    # wait), so it bounds the pipeline on its own; a step of small kernels is launch-bound
    host = ([host_seconds(shape, layout, profile, s) for s in layout.distinct_stages(shape.n_layer)]
            if profile.async_launch else [0.0])
    straggler_s = max(0.0, pipeline - max(pipeline - straggler_s, max(host)))  # what a host-bound step leaves of it
    pipeline = max(pipeline, max(host))
    interference_s = interference * (hidden_dp + m * slow["tp_hidden"])  # dp sync and tp collectives hidden
    total = pipeline + dp_end + optimizer_s + interference_s
    flops = flops_per_step(shape, layout.global_batch, checkpointing=layout.checkpointing)
    gpus = layout.world_size
    comm = {"comm_tp_s": m * slow["tp"], "comm_cp_s": m * slow["cp"], "comm_ep_s": m * slow["ep"],
            "comm_pp_s": m * slow["pp"], "comm_dp_s": m * dp_mb + dp_end}
    return {
        "compute_s": m * slow["gemm"],
        "memory_s": m * slow["mem"],
        "comm_s": sum(comm.values()),
        **comm,
        "bubble_s": pipeline - steady - straggler_s,
        "optimizer_s": optimizer_s,
        "interference_s": interference_s,
        "straggler_s": straggler_s,
        "total_s": total,
        "host_s": max(host),
        "launch_bound": max(host) / total,
        "bubble_fraction": (pipeline - steady - straggler_s) / pipeline,
        "mfu": flops["model"] / (total * gpus * peak),
        "hfu": flops["total"] / (total * gpus * peak),
        "tokens_per_s": layout.global_batch * shape.seq_len / total,
        "slowest_stage": slow_i,
    }


def stage_cost_terms(shape: ModelShape, layout: Layout, profile: HardwareProfile, *,
                     framework=None) -> tuple[float, float, float]:
    """``(per_layer, first_extra, last_extra)``: one micro-batch's busy seconds on a pipeline stage
    of ``n`` layers are ``n · per_layer + extra`` (+ its p2p, the same on every stage), where the
    first stage's extra is the embedding (lookup, its tp all-reduce, its share of the gradient
    accumulation) and the last stage's the final norm, the lm_head, the loss and their
    collectives. What :func:`mgpukit.costmodel.balance.balance_stages` balances."""
    fw = get_framework(framework)
    profile = _kernel_of(fw.on(profile), layout.attention_kernel)
    kernels = _layer_kernels(shape, layout, profile, fw.autocast)

    def busy(stage: int, layers: int) -> float:
        lay = replace(layout, pp=3, stage_layers=(layers,) * 3, schedule="1f1b", v=1)
        return _busy(_stage(shape, lay, profile, stage, kernels, scatter_gather=fw.pp_scatter_gather,
                            autocast=fw.autocast, overlap_p2p=fw.overlap_p2p))

    one = busy(1, 1)
    return busy(1, 2) - one, busy(0, 1) - one, busy(2, 1) - one


def _busy(stage: dict) -> float:
    return stage["gemm"] + stage["mem"] + stage["tp"] + stage["cp"] + stage["ep"] + stage["pp"]
