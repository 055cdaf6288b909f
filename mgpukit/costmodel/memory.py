"""Memory per GPU by category: parameters, gradients, optimizer state, activations.

**Model states** (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", §3 and Figure 1). With mixed precision and Adam each of the Ψ
parameters on a GPU costs 2 bytes (bf16 weights) + 2 (bf16 gradients) + K = 12 (fp32 master
copy, momentum, variance): ``(2 + 2 + K)·Ψ = 16Ψ``. Plain fp32 training is 4 + 4 + 8. ZeRO
shards over the ``N_d`` data-parallel ranks — ``dp · cp`` of them: the ranks of a context-parallel
group hold the same weights, so Megatron-Core's distributed optimizer (its ``intra_dp_cp_group``,
module ``megatron.core.optimizer``) and torchtitan's FSDP (the ``dp_shard_cp`` mesh) shard over both:

=====  ======================================
stage  bytes per GPU (mixed precision)
=====  ======================================
0      ``(2 + 2 + 12)·Ψ``
1      ``2Ψ + 2Ψ + 12Ψ/N_d``               (optimizer states)
2      ``2Ψ + (2 + 12)·Ψ/N_d``             (+ gradients)
3      ``(2 + 2 + 12)·Ψ/N_d``              (+ parameters; plus two gathered layers in flight)
=====  ======================================

Here Ψ is what one GPU holds *before* ZeRO: its pipeline stage's layers (plus the embedding
on the first stage and the output layer on the last), split by tensor parallelism except for
norms and row-parallel biases.

**Experts** (a mixture-of-experts block; Lepikhin et al. 2020, GShard; DeepSpeed-MoE, Rajbhandari
et al. 2022, §4): each of the ``ep`` expert-parallel ranks holds ``E/ep`` of every block's experts,
so the experts' ``Ψ_e`` weights count ``Ψ_e/ep`` per GPU; everything else is replicated over the
``dp·ep`` ranks of the data. ZeRO shards each over the ranks that hold copies of it: the experts
over ``N_d = dp`` (the expert-data-parallel group), the rest over ``dp·ep``.

**Activations** (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", §4). Per layer, micro-batch ``b``, sequence ``s``, hidden ``h``, ``a``
heads, 16-bit activations with dropout:

    no parallelism          s·b·h·(34 + 5·a·s/h)
    tensor parallel t       s·b·h·(10 + 24/t + 5·a·s/(h·t))
    + sequence parallel     s·b·h·(34 + 5·a·s/h)/t
    + selective recompute   s·b·h·34/t          (the s² attention core is recomputed)
    full recompute          2·s·b·h (/t with SP)  (only each layer's input is kept)

In a MoE block the MLP's inner activations are those of the dispatched slots, ``E·C`` per
sequence (``C = ⌈f·k·s/E⌉``, `cp_ep.expert_capacity`; about ``f·k`` per token), each keeping the
expert's inner activations; the dispatched input and the expert output (``2·h`` per slot) and
the router's fp32 probabilities (``4·E`` per token) are kept beside them.

The ``5·a·s/h`` term is the **materialized** attention core: the softmax output (2 bytes),
the attention-dropout mask (1) and its output (2), each ``a·s²·b``. A **fused** kernel —
FlashAttention (Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention
with IO-Awareness", arXiv:2205.14135, §3.1) and PyTorch's ``scaled_dot_product_attention``,
which mgpukit's GPT calls — never writes the ``s×s`` matrices: backward recomputes them from
q, k, v, the output and one fp32 log-sum-exp per row and head, ``4·a·s·b`` bytes (``/t``,
the heads are split by tp), and regenerates the attention-dropout mask from the RNG state
instead of storing it. ``Layout.flash_attention`` chooses: True (the default; the kit's own
models, Llama 2 and 3) keeps only the log-sum-exp; False keeps Korthikanti's term (Megatron-LM
2021's fused softmax, Narayanan et al. 2021, predates FlashAttention). Caveat: PyTorch on CPU
falls back to the materializing math kernel when attention dropout is on.

:func:`activation_bytes_per_layer` builds those numbers tensor by tensor, so GQA, gated MLPs,
other d_ff and fp32 follow. A pipeline stage holds ``n_layer/p`` layers times the
micro-batches in flight of its schedule (:mod:`mgpukit.costmodel.pipeline`); the last stage
also holds fp32 logits for the loss, ``4·s·b·V/t``. Not modelled: CUDA context, allocator
fragmentation, communication buffers (the profile's ``usable_memory`` leaves room for them).
"""

from __future__ import annotations

from dataclasses import replace

from mgpukit.costmodel.experts import expert_slots
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.pipeline import microbatches_in_flight
from mgpukit.costmodel.shapes import ModelShape, layer_expert_split, layer_param_split, param_breakdown

CATEGORIES = ("params", "grads", "optimizer", "activations")


def activation_bytes_per_layer(
    shape: ModelShape, *, micro_batch: int, tp: int = 1, sp: bool = False,
    checkpointing: str = "none", dtype_bytes: int = 2, flash_attention: bool = True, fp8: bool = False,
) -> float:
    """Bytes one transformer layer keeps for backward, for one micro-batch (module docstring).
    ``flash_attention``: the attention core keeps one fp32 log-sum-exp per row and head (fused
    kernel, Dao et al. 2022) instead of the ``s×s`` softmax, dropout output and mask.

    ``fp8``: FP8 GEMMs through Transformer Engine, which keeps each linear's input for the weight
    gradient as the **FP8 copy** it cast for the forward GEMM (``te.Linear`` /
    ``LayerNormLinear`` / ``LayerNormMLP``: ``saved_inputmat = inputmat``, the FP8 tensor, when
    the wgrad runs in FP8), 1 byte instead of 2: the q/k/v input and the MLP input (the norms'
    outputs) and the second MLP linear's input. The out-projection's input is the attention
    output, which a fused attention kernel keeps in 16 bits for its own backward: there the FP8
    copy is one byte *more* (without fused attention, one byte less)."""
    s, b, h, e = shape.seq_len, micro_batch, shape.d_model, dtype_bytes
    sbh = s * b * h
    if checkpointing == "full":  # only the layer's input survives the forward
        return e * sbh / (tp if sp else 1)
    mask = 1 if shape.dropout else 0  # dropout masks are stored as bytes
    # Replicated across tp ranks unless SP: both norms' inputs, the q/k/v input, the MLP input,
    # and the dropout masks after the two row-parallel linears.
    replicated = e * 4 * sbh + mask * 2 * sbh
    # Split by tp: q, k, v; the out-projection input; the MLP's inner activations.
    moe, width = shape.n_expert > 1, shape.expert_ffn or shape.d_ff  # (inline: the search calls this ~10^5 times)
    mlp_inner = width * (3 if shape.gated_mlp else 2)  # fc1 out (gate, up) + act out
    rows = b * expert_slots(shape) if moe else s * b  # tokens through the MLP (MoE: slots)
    split = e * (s * b * (h + 2 * shape.kv_dim + h) + rows * mlp_inner)
    if moe:  # the dispatched input and the expert output per slot; fp32 router probabilities
        replicated += e * 2 * rows * h + 4 * s * b * shape.n_expert
    if flash_attention:  # fused kernel: fp32 log-sum-exp per (row, head); dropout mask from the RNG
        core = 4 * s * b * shape.n_head
    else:  # the s² attention core: softmax output (+ dropout output and its mask)
        core = s * s * b * shape.n_head * (e * (2 if shape.dropout else 1) + mask)
    if checkpointing == "selective":
        core = 0.0
    if fp8:  # TE keeps the linears' inputs as FP8 copies (docstring)
        replicated -= (e - 1) * 2 * sbh  # q/k/v input, MLP input
        act_out = rows * width  # the second MLP linear's input
        split -= (e - 1) * act_out + (-sbh if flash_attention else (e - 1) * sbh)
    return (replicated / (tp if sp else 1)) + (split + core) / tp


def stage_expert_params(shape: ModelShape, layout: Layout, stage: int) -> float:
    """The experts' share of :func:`stage_params`: ``E/ep`` experts per block, tp-split (0 when dense)."""
    if not shape.is_moe:
        return 0.0
    split, replicated = layer_expert_split(shape)
    return layout.layers_of_stage(shape.n_layer, stage) * (split / layout.tp + replicated) / layout.ep


def stage_params(shape: ModelShape, layout: Layout, stage: int) -> float:
    """Parameters held by one GPU of pipeline ``stage`` (tp-split, ``1/ep`` of the experts, before
    ZeRO sharding)."""
    split, replicated = layer_param_split(shape)
    n = layout.layers_of_stage(shape.n_layer, stage) * (split / layout.tp + replicated)
    if shape.n_expert > 1:
        n += stage_expert_params(shape, layout, stage)
    pieces = param_breakdown(shape)
    d = shape.d_model
    if stage == 0:  # token embedding (vocab-parallel) + position table (replicated)
        pos = shape.seq_len * d if shape.learned_pos else 0
        n += (pieces["embedding"] - pos) / layout.tp + pos
    if stage == layout.pp - 1:  # final norm (replicated) + lm_head (vocab-parallel)
        norm = 2 * d if shape.norm == "layernorm" else d
        head = pieces["head"] - norm
        if shape.tied_embeddings and layout.pp > 1:
            head += shape.vocab * d  # Megatron keeps a copy of the tied embedding on the last stage
        n += head / layout.tp + norm
    return n


def model_state_bytes(psi: float, layout: Layout, *, gather_bytes: float = 0.0,
                      optimizer_states: int = 2, shards: int | None = None) -> dict[str, float]:
    """ZeRO table (module docstring) for ``psi`` local parameters; ``gather_bytes``: ZeRO-3's
    temporarily gathered full layers, counted under params. ``optimizer_states``: fp32 tensors
    the optimizer keeps per parameter — 2 for Adam (m, v: the paper's K = 8 in fp32, 12 with
    the master copy), 1 for SGD with momentum, 0 for plain SGD. ``shards``: the ranks ZeRO
    shards over (default ``dp × cp``: the cp ranks of a replica hold the same weights,
    `steptime._dp_exposed`)."""
    n = layout.dp * layout.cp if shards is None else shards
    if layout.dtype in ("bf16", "fp16", "fp8"):
        p, g, k = 2, 2, 4 + 4 * optimizer_states  # 16-bit weights and grads, fp32 master + states
    else:
        p, g, k = 4, 4, 4 * optimizer_states  # fp32 weights, fp32 grads, states
    z = layout.zero
    return {
        "params": psi * p / (n if z >= 3 else 1) + (gather_bytes if z >= 3 else 0.0),
        "grads": psi * g / (n if z >= 2 else 1),
        "optimizer": psi * k / (n if z >= 1 else 1),
    }


def offload_traffic_bytes(psi: float, layout: Layout, *, shard_bytes: int = 4) -> float:
    """Bytes crossing the host link per GPU per step under ZeRO-3 with CPU offload (PyTorch
    FSDP2's ``CPUOffloadPolicy``; the idea of Ren et al. 2021, "ZeRO-Offload", §4): the
    sharded parameters, gradients and optimizer states live in host memory and the optimizer
    steps there. Per micro-batch, this GPU's parameter shard is copied to the device before its
    forward and its backward all-gather (``2·Ψ/N``) and its gradient shard back (``Ψ/N``).

    The shards cross as fp32 (``shard_bytes`` = 4), whatever the compute precision: in torch
    2.13 FSDP2 copies the fp32 shard to the device and casts it to the 16-bit dtype there
    (`FSDPParam.all_gather_inputs`: ``.to(device)`` then ``_to_dtype_if_needed``), and casts
    the reduce-scattered gradient back to fp32 before copying it out (`foreach_reduce`). So
    ``3·4Ψ/N`` per micro-batch, × ``num_micro_batches`` per step (each micro-batch gathers and
    reduces again unless gradient sync is switched off between them)."""
    return 3 * psi * shard_bytes / (layout.dp * layout.cp) * layout.num_micro_batches


def stage_memory(shape: ModelShape, layout: Layout, stage: int, *, micro_batch: int | None = None) -> dict[str, float]:
    """Bytes per GPU of pipeline ``stage``, by category, plus ``total``."""
    b = micro_batch or layout.micro_batch
    e = layout.dtype_bytes
    psi = stage_params(shape, layout, stage)
    split, replicated = layer_param_split(shape)
    e_split, e_replicated = layer_expert_split(shape) if shape.is_moe else (0, 0)
    # ZeRO-3: current + prefetched layer
    gather = 2 * (split / layout.tp + replicated + (e_split / layout.tp + e_replicated) / layout.ep) * e
    experts = stage_expert_params(shape, layout, stage) if shape.n_expert > 1 else 0.0
    mem = model_state_bytes(psi - experts, layout, gather_bytes=gather, shards=layout.dp * layout.cp * layout.ep)
    if experts:  # each expert's copies: the dp × cp ranks of its ep rank (module docstring)
        for c, v in model_state_bytes(experts, layout).items():
            mem[c] += v

    kw = dict(micro_batch=b, tp=layout.tp, sp=layout.sp, dtype_bytes=e, flash_attention=layout.flash_attention,
              fp8=layout.dtype == "fp8")
    per_layer = activation_bytes_per_layer(shape, checkpointing=layout.checkpointing, **kw)
    layers = layout.layers_of_stage(shape.n_layer, stage)
    in_flight = microbatches_in_flight(layout.schedule, layout.pp, layout.num_micro_batches, layout.v, stage)
    act = layers * per_layer * in_flight
    # During backward one layer's recomputed activations exist at once, for one micro-batch.
    if layout.checkpointing == "full":
        act += activation_bytes_per_layer(shape, checkpointing="none", **kw)
    elif layout.checkpointing == "selective":
        act += activation_bytes_per_layer(shape, **kw) - activation_bytes_per_layer(shape, checkpointing="selective", **kw)
    if stage == layout.pp - 1:  # final-norm input, lm_head input, fp32 logits for the loss
        sbh = shape.seq_len * b * shape.d_model
        act += 2 * e * sbh / (layout.tp if layout.sp else 1) + 4 * shape.seq_len * b * shape.vocab / layout.tp
    mem["activations"] = act / layout.cp  # context parallelism: each rank holds seq_len / cp tokens
    mem["total"] = sum(mem[c] for c in CATEGORIES)
    return mem


def memory_per_rank(shape: ModelShape, layout: Layout, *, micro_batch: int | None = None) -> dict[str, float]:
    """Bytes per GPU by category (``params, grads, optimizer, activations, total``) on the
    fullest GPU: the first pipeline stage (most micro-batches in flight) or the last (logits).
    ``micro_batch`` overrides ``layout.micro_batch``."""
    stages = layout.distinct_stages(shape.n_layer)
    return max((stage_memory(shape, layout, s, micro_batch=micro_batch) for s in stages), key=lambda m: m["total"])


def allocator_peak(shape: ModelShape, layout: Layout, *, stage: int = 0, micro_batch: int | None = None,
                   optimizer_states: int = 2, grads_persist: bool = True, autocast: bool = False,
                   workspace: float = 0.0, ddp_buckets: bool = False,
                   fp32_logits: bool = False) -> dict[str, float]:
    """The caching allocator's high-water mark on one GPU of pipeline ``stage`` — what
    ``torch.cuda.max_memory_allocated`` reads, and what the emulator's allocator meter
    (`mgpukit.measure.allocator`) counts — as a closed form: the categories of `stage_memory`
    plus what is alive only at the worst moment, the start of backward:

    - the loss's backward (last stage): NLL's gradient and log-softmax's gradient, each an fp32
      ``s·b·V/t``, beside the saved log-probabilities (already counted), ``2·4·s·b·V/t``;
    - ``autocast``: the kit trains bf16 with fp32 weights, gradients and optimizer states, and
      autocast's 2-byte copy of each weight lives from its forward to its backward (``2Ψ``); off:
      the Megatron policy of `model_state_bytes` (2-byte weights, fp32 master). The loss then
      follows CUDA's autocast policy (`autocast_loss_bytes`): ``10·s·b·V/t`` at its worst
      moment, not fp32's ``12``;
    - ``grads_persist=False`` (``zero_grad(set_to_none=True)``): no gradient exists yet then;
    - two cuBLAS workspaces (``workspace`` bytes each: the forward thread's, the autograd
      thread's; the profile's ``[memory] blas_workspace``);
    - ``ddp_buckets``: torch DDP's flat bucket buffers beside the gradients, one more fp32 copy
      of them (``gradient_as_bucket_view=False``, its default; Li et al. 2020 §3.2.3);
    - ``fp32_logits`` (with ``autocast``): the loss reads fp32 logits outside autocast — the
      kit's policy (`strategies.policies.precision`: each piece hands fp32 on, Accelerate's
      ``convert_outputs_to_fp32``) — so it keeps fp32's ``4·s·b·V/t`` log-probabilities and
      makes two fp32 gradients, ``12`` bytes per logit as in fp32, not autocast's ``10``.

    ``optimizer_states``: fp32 tensors per parameter (AdamW 2, SGD with momentum 1, plain SGD 0).
    Returns the categories, ``transient`` (the moment's extra) and ``peak``."""
    b = micro_batch or layout.micro_batch
    mem = stage_memory(shape, layout, stage, micro_batch=b)
    psi = stage_params(shape, layout, stage)
    if autocast:  # fp32 weights, gradients and states; 2-byte copies of the weights
        fp32 = replace(layout, dtype="fp32")
        mem.update(model_state_bytes(psi, fp32, optimizer_states=optimizer_states))
        mem["params"] += 2 * psi / (layout.dp * layout.cp if layout.zero >= 3 else 1)
        if layout.checkpointing == "none":
            layers = layout.layers_of_stage(shape.n_layer, stage)
            in_flight = microbatches_in_flight(layout.schedule, layout.pp, layout.num_micro_batches, layout.v, stage)
            mem["activations"] += layers * in_flight * (
                autocast_activation_bytes_per_layer(shape, micro_batch=b, tp=layout.tp)
                - activation_bytes_per_layer(shape, micro_batch=b, tp=layout.tp, dtype_bytes=2,
                                             flash_attention=layout.flash_attention)) / layout.cp
    else:
        mem.update(model_state_bytes(psi, layout, optimizer_states=optimizer_states))
    if not grads_persist:
        mem["grads"] = 0.0
    transient = 2.0 * workspace
    if ddp_buckets:
        mem["grads"] += 4 * psi
    if stage == layout.pp - 1:
        sbv = shape.seq_len * b * shape.vocab / layout.tp / layout.cp
        if autocast:  # the loss's saved tensors under autocast (stage_memory counted fp32 log-probs),
            # and the final norm's input in fp32 beside lm_head's 2-byte input (stage_memory: 2 + 2)
            saved, grad = (4 * sbv, 2 * 4 * sbv) if fp32_logits else autocast_loss_bytes(sbv)
            sbh = shape.seq_len * b * shape.d_model / (layout.tp if layout.sp else 1) / layout.cp
            mem["activations"] += saved - 4 * sbv + 2 * sbh
            transient += grad
        else:
            transient += 2 * 4 * sbv
    mem["transient"] = transient
    mem["peak"] = sum(mem[c] for c in CATEGORIES) + transient
    mem["total"] = sum(mem[c] for c in CATEGORIES)
    return mem


def autocast_activation_bytes_per_layer(shape: ModelShape, *, micro_batch: int, tp: int = 1) -> float:
    """Bytes one layer keeps for backward under ``torch.autocast`` (bf16) with fp32 weights — the
    kit's mixed precision, not Megatron's: the residual stream stays fp32, so both norms save
    fp32 inputs (``8sbh``); each linear casts its fp32 input itself, so q, k, v and fc1 keep four
    2-byte copies of the norms' outputs (``8sbh``); q, k, v and the attention output are 2-byte
    (``8sbh``: a fused kernel — flash, memory-efficient, cuDNN, and the CPU's flash — writes its
    output as ``(B, T, heads, hd)``, so o's input, ``transpose(1, 2).reshape``, is a view, not a
    copy), fc1's output and the activation's 2-byte (``4sbf``), and the fused attention one fp32
    log-sum-exp per row and head. Counted on the kit's GPT under the emulator's allocator meter
    (tests/test_allocator.py)."""
    s, b, h, f = shape.seq_len, micro_batch, shape.d_model, shape.d_ff
    replicated = 16 * s * b * h
    split = 2 * s * b * (3 * h + h) + 4 * s * b * f * (1.5 if shape.gated_mlp else 1) + 4 * s * b * shape.n_head
    return replicated + split / tp


def autocast_loss_bytes(sbv: float) -> tuple[float, float]:
    """``(saved, gradient)`` bytes of ``F.cross_entropy`` on bf16 logits of ``sbv`` elements under
    CUDA's autocast — what is alive at the loss's worst moment, the start of its backward.

    ``cross_entropy`` has no autocast rule on CUDA; it decomposes into
    ``log_softmax(x, dtype=x.dtype)`` and ``nll_loss``. ``log_softmax`` is on autocast's
    "fp32 unless a dtype is given" list and is given one (bf16), so it runs in bf16 and saves its
    2-byte output; ``nll_loss`` is on the fp32 list, so autocast casts the log-probabilities to
    fp32 and nll_loss saves that 4-byte copy (PyTorch ``aten/src/ATen/autocast_mode.cpp``,
    ``fp32_set_opt_dtype``; ``LossNLL.cpp``, ``cross_entropy_loss``). Backward's first node makes
    nll's gradient, an fp32 ``s·b·V``, while both saved tensors live: ``2 + 4 + 4 = 10`` bytes per
    logit. (On a CPU autocast casts the logits to fp32 before cross_entropy — ``4 + 4 + 4``: the
    GPU's policy is the one a GPU's peak follows.)"""
    return 6.0 * sbv, 4.0 * sbv
