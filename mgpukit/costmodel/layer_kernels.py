"""The seconds of one transformer layer's kernels, and of the model's two ends, on one GPU.

The compute half of :mod:`mgpukit.costmodel.steptime` (its items 1–3): per layer and micro-batch,
the GEMMs on the roofline with tile and wave quantisation (:mod:`mgpukit.costmodel.kernels`), split
by tensor parallelism as Megatron does (Shoeybi et al. 2019), two GEMMs per linear in backward; the
attention core fused (Dao et al. 2022, at the rate of the run's kernel generation:
:mod:`~mgpukit.costmodel.attention_kernels`) or as Megatron-LM 2021's batched GEMMs with the ``s×s``
scores in HBM; the memory-bound kernels (norms, activation, dropout, residual, their backward) as bytes
over HBM bandwidth, replicated over the tp group unless sequence parallelism splits them (Korthikanti et
al. 2022); autocast's extra casts (:func:`_autocast_bytes`); the embedding and the head + loss
(:func:`_ends`). No communication here: `steptime` adds what each collective exposes.

The search asks for thousands of layouts that share a few hundred kernel sets, so the results are
remembered per profile (:func:`_memo`).
"""

from __future__ import annotations

from mgpukit.costmodel.attention_kernels import with_attention_kernel
from mgpukit.costmodel.experts import moe_expert_rows
from mgpukit.costmodel.kernels import at_sustained_power, attention_seconds, gemm_seconds, has_gemm_table, memory_seconds
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.profile import HardwareProfile
from mgpukit.costmodel.shapes import ModelShape

_MEMO: dict = {}  # (what a layer's kernels depend on, id(profile)) -> (profile, kernels): the search's
# thousands of layouts share a few hundred (tp, cp, micro-batch) kernel sets; the profile is kept in the
# value so its id cannot be reused while the entry lives


def _memo(key: tuple, profile, compute):
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    if len(_MEMO) > 4096:
        _MEMO.clear()
    value = compute()
    _MEMO[key] = (profile, value)
    return value


def _sustained(profile: HardwareProfile) -> HardwareProfile:
    return _memo(("sustained", id(profile)), profile, lambda: at_sustained_power(profile))


def _kernel_of(profile: HardwareProfile, kernel: str) -> HardwareProfile:
    """``profile`` at the attention rate of the run's kernel generation (`with_attention_kernel`), remembered."""
    return profile if not kernel else _memo(("attention", id(profile), kernel), profile,
                                            lambda: with_attention_kernel(profile, kernel))


def _layer_kernels(shape: ModelShape, layout: Layout, profile: HardwareProfile, autocast: bool = False) -> dict[str, float]:
    """:func:`_layer_kernels_of`, remembered: it reads only the fields in the key."""
    key = ("layer", id(profile), shape, layout.tp, layout.cp, layout.ep, layout.sp, layout.micro_batch, layout.dtype,
           layout.flash_attention, autocast)
    return dict(_memo(key, profile, lambda: _layer_kernels_of(shape, layout, profile, autocast)))


def _layer_kernels_of(shape: ModelShape, layout: Layout, profile: HardwareProfile,
                      autocast: bool = False) -> dict[str, float]:
    """Seconds of one layer, one micro-batch, one GPU: ``gemm_fwd, gemm_bwd, mem_fwd, mem_bwd``;
    ``attn_*`` are the attention core's share of them (its GEMMs, its memory kernels)."""
    t, dt, e = layout.tp, layout.dtype, layout.dtype_bytes
    s, d, f = shape.seq_len, shape.d_model, shape.mlp_width
    n = layout.micro_batch * s // layout.cp  # tokens on this GPU
    gate = 2 if shape.gated_mlp else 1
    # (in, out) of each GEMM: q, k, v fused or apart (three narrow GEMMs fill fewer SMs: at tp 8
    # GPT-2 350M's q is 128 wide, 2.2x the time of a third of a fused one), o, fc1, fc2
    qkv = ([(d, (d + 2 * shape.kv_dim) // t)] if shape.fused_qkv
           else [(d, d // t), (d, shape.kv_dim // t), (d, shape.kv_dim // t)])
    mlp = [(d, gate * f // t), (f // t, d)]
    # (rows, in, out, batch): a dense MLP runs the n tokens; MoE experts run their dispatched slots:
    # E/ep experts per rank, each with C slots per sequence from each of the ep ranks (one grouped GEMM)
    rows, held = n, 1
    if shape.is_moe:
        rows, held = moe_expert_rows(shape, layout)
    gemms = ([(n, inp, out, 1) for inp, out in qkv + [(d // t, d)]] + [(rows, inp, out, held) for inp, out in mlp]
             + ([(n, d, shape.n_expert, 1)] if shape.is_moe else []))  # the router
    g_fwd = sum(gemm_seconds(m, out, inp, profile, dtype=dt, batch=bt) for m, inp, out, bt in gemms)
    g_bwd = sum(gemm_seconds(m, inp, out, profile, dtype=dt, batch=bt) + gemm_seconds(inp, out, m, profile, dtype=dt, batch=bt)
                for m, inp, out, bt in gemms)
    # fp8 GEMMs (Transformer Engine's recipe): each linear's input is cast to fp8 in forward and
    # its output gradient in backward (read 2 bytes, write 1); attention and the head stay bf16
    cast_fwd = 3 * sum(m * bt * inp for m, inp, _, bt in gemms) if dt == "fp8" else 0.0
    cast_bwd = 3 * sum(m * bt * out for m, _, out, bt in gemms) if dt == "fp8" else 0.0
    dt = "bf16" if dt == "fp8" else dt  # the attention core's dtype

    # attention core: (b · heads/tp) problems of q = s/cp queries against all s keys
    batch, q, hd = layout.micro_batch * shape.n_head // t, s // layout.cp, shape.head_dim
    drop = 1 if shape.dropout else 0
    if layout.flash_attention:  # one fused kernel each way, as the emulator charges SDPA (its
        # [attention] table and the causal tiles it skips; without a table, all q × s scores at
        # the GEMM rate of a q × head_dim output)
        # With cp, a load-balanced ring (each rank a chunk from each end of the sequence) leaves
        # each rank half of its q × s tiles under the causal mask, as without cp
        # (without an [attention] table every tile is charged, cp or not)
        causal = dict(causal=True) if layout.cp == 1 else dict(causal=False)
        half = 0.5 if layout.cp > 1 and profile.attention is not None and has_gemm_table(profile, dt) else 1.0
        a_fwd = half * attention_seconds(batch, q, s, hd, profile, dtype=dt, **causal)
        a_bwd = half * attention_seconds(batch, q, s, hd, profile, dtype=dt, backward=True, **causal)
        a_mem_fwd = a_mem_bwd = 0.0
    else:
        def bmm(m_, n_, k_):
            return gemm_seconds(m_, n_, k_, profile, dtype=dt, batch=batch)

        a_fwd = bmm(q, s, hd) + bmm(q, hd, s)  # scores = Q·Kᵀ, then A·V
        a_bwd = bmm(q, hd, s) + bmm(s, hd, q) + bmm(q, s, hd) + bmm(s, hd, q)  # dQ, dK, dA, dV
        scores = batch * q * s
        # fused scale-mask-softmax reads and writes the scores; dropout adds a 1-byte mask
        a_mem_fwd = memory_seconds(scores * (2 * e + drop * (2 * e + 1)), profile)
        a_mem_bwd = memory_seconds(scores * (3 * e + drop * (2 * e + 1)), profile)

    act = n * d / (t if layout.sp else 1)  # elements of one replicated (or SP-split) activation
    ffn = rows * held * f / t
    mem_fwd = e * 4 * act + e * (gate + 1) * ffn + 2 * (3 * e * act + drop * act)  # 2 norms, act fn, 2 drop-add
    mem_bwd = e * 6 * act + e * (gate + 2) * ffn + 2 * (2 * e * act + drop * act) + 2 * 3 * e * act  # + grad adds
    if shape.is_moe:  # dispatch (scatter into the slots) and combine (gather, gate, sum), each read + write
        # a slot's d values; fp32 router softmax and top-k over n·E; the same again in backward
        moe = 2 * 2 * e * rows * held * d + 3 * 4 * n * shape.n_expert
        mem_fwd, mem_bwd = mem_fwd + moe, mem_bwd + moe
    if autocast and e == 2:
        mem_fwd, mem_bwd = _autocast_bytes(shape, act, ffn, gate, drop)
    return {
        "gemm_fwd": g_fwd + a_fwd,
        "gemm_bwd": g_bwd + a_bwd,
        "mem_fwd": memory_seconds(mem_fwd + cast_fwd, profile) + a_mem_fwd,
        "mem_bwd": memory_seconds(mem_bwd + cast_bwd, profile) + a_mem_bwd,
        "attn_gemm_fwd": a_fwd,
        "attn_mem_fwd": a_mem_fwd,
        "attn_fwd": a_fwd + a_mem_fwd,
        "attn_bwd": a_bwd + a_mem_bwd,
    }


def _autocast_bytes(shape: ModelShape, act: float, ffn: float, gate: int, drop: int) -> tuple[float, float]:
    """Forward and backward bytes of a layer's memory-bound kernels under ``torch.autocast`` with
    fp32 weights (the kit's plain loop; torch AMP): the residual stream stays fp32, LayerNorm
    runs in fp32 (autocast's float32 op list, PyTorch "Automatic Mixed Precision" docs), and each
    linear casts its fp32 input to 16 bits on every call — three times for separate q, k, v —
    whose backward casts the gradient back (read 2, write 4) and sums the q, k, v input
    gradients in fp32. The activation function, attention and dropout stay 16-bit."""
    readers = (1 if shape.fused_qkv else 3) + 1  # linears casting a norm's fp32 output: q/k/v, fc1
    fwd = (2 * 8 * act  # two fp32 norms, read + write
           + 6 * readers * act  # casts fp32 -> 16-bit: read 4, write 2
           + 2 * ((4 + 2 + 4) * act + drop * act)  # fp32 residual + 16-bit branch -> fp32
           + 2 * (gate + 1) * ffn)  # activation function, 16-bit
    bwd = (2 * 12 * act  # two fp32 norm backwards: read grad and input, write grad
           + 6 * readers * act  # the casts' backward: 16-bit grad -> fp32
           + 12 * (readers - 2) * act  # q, k, v input gradients summed in fp32
           + 2 * (2 * 2 * act + drop * act) + 2 * 3 * 4 * act  # branch grads, fp32 residual grad adds
           + 2 * (gate + 2) * ffn)
    return fwd, bwd


def _ends(shape: ModelShape, layout: Layout, profile: HardwareProfile, *, embed: bool, head: bool,
          autocast: bool = False) -> dict:
    """GEMM and memory seconds of the embedding (first stage) and the head + loss (last stage)."""
    t, e = layout.tp, layout.dtype_bytes
    dt = "bf16" if layout.dtype == "fp8" else layout.dtype  # fp8 recipes keep the output layer in bf16
    n, d, V = layout.micro_batch * shape.seq_len // layout.cp, shape.d_model, shape.vocab
    out = {"gemm_fwd": 0.0, "gemm_bwd": 0.0, "mem_fwd": 0.0, "mem_bwd": 0.0}
    if embed:  # lookup + position add; backward scatters into the table
        out["mem_fwd"] += memory_seconds(3 * e * n * d, profile)
        out["mem_bwd"] += memory_seconds(3 * e * n * d, profile)
    if head:  # final norm, vocab-parallel lm_head, cross-entropy in fp32 over V/tp logits
        out["gemm_fwd"] += gemm_seconds(n, V // t, d, profile, dtype=dt)
        out["gemm_bwd"] += gemm_seconds(n, d, V // t, profile, dtype=dt) + gemm_seconds(d, V // t, n, profile, dtype=dt)
        logits = n * V / t
        cast = (e + 4) * logits if autocast and e == 2 else 0.0  # autocast: 16-bit logits cast to fp32 for the loss
        out["mem_fwd"] += memory_seconds(2 * e * n * d + logits * (e + 8) + cast, profile)
        out["mem_bwd"] += memory_seconds(3 * e * n * d + logits * (8 + e) + cast, profile)
    return out
