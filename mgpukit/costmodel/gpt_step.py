"""Analytic step time of mgpukit's own GPT on a hardware profile — in closed form, no run.

This is the "analytic" end of the validation chain (docs/ARCHITECTURE.md, "Four clocks"): the
same roofline the emulator charges op by op (`mgpukit.measure.vclock`), written down as formulas in the model's
sizes, so that *analytic ≈ emulated* tests the emulator's plumbing (clock joins, collective
start times, overlap) rather than restating it. The general planner
(`mgpukit.costmodel.steptime`) counts matmul FLOPs only; that is fine for billion-parameter
models but not for the kit's tiny GPT, where layer norms, GELU, residual adds, gradient
accumulation and the optimizer move as many bytes as the matmuls compute. Every term:

Notation, per rank: ``N = b·T`` tokens (``b`` sequences of ``T``), width ``d``, MLP width
``f``, vocabulary ``V``, ``L`` layers, ``H`` heads, ``e`` bytes per element (fp32: 4; token ids
are int64: 8); ``R = peak · efficiency`` FLOP/s, ``BW`` memory bytes/s. An op takes
``max(flops / R, bytes / BW, t_min)``, bytes = what it reads + what it writes, and ``t_min``
the profile's minimum kernel time (`[launch] min_kernel`: a kernel occupies the stream a few
µs however little it does — launch latency and tail, NVIDIA's "Getting Started with CUDA
Graphs", 2019; 0 on CPU profiles and in `kernels_only()`). It matters for the ops that run
once per parameter *tensor* — a GPT-2 350M has 389 of them, 240 of them biases and norms of
``d`` elements that move a few kB — so those are one op per tensor below, never one lump.

**Matmuls** (Megatron-style count, Narayanan et al. 2021 §5.1, for our shapes). Per layer
forward, q, k, v, o: ``2·N·d²`` FLOPs each; fc1 and fc2: ``2·N·d·f`` each; attention scores
``Q·Kᵀ`` and ``A·V``: ``2·2·N·T·d`` (causal masking not halved, as in Megatron); once per
model the ``lm_head``: ``2·N·d·V``. A linear reads its input, weight (and bias) and writes its
output: ``e(N·in + in·out + out + N·out)``. Backward runs two matmuls per linear (gradient
w.r.t. input and w.r.t. weight, same FLOPs and bytes as forward each) plus a column sum for
the bias (``e(N·out + out)``); flash attention backward recomputes the scores: 5 batched
matmuls, ``2.5×`` the forward FLOPs, and reads q, k, v, the output, its gradient and the
log-sum-exp (``e·N·H``) while writing dq, dk, dv: ``e(8·N·d + N·H)``; forward reads q, k, v
and writes the output and log-sum-exp: ``e(4·N·d + N·H)``. No ``T×T`` matrix is stored.

**Memory-bound ops** (no FLOPs charged; bytes / BW):

- embedding lookups: table + ids + output, ``e(V·d + N·d) + 8N`` and ``e(2·T·d) + 8T``, and the
  broadcast add of the two ``e(2·N·d + T·d)``; backward: a batch sum for the position table
  ``e(N·d + T·d)`` and two dense scatters ``e(N·d + V·d) + 8N``, ``e(2·T·d) + 8T``;
- layer norm (``2L + 1`` of them): forward ``e(2·N·d + 2d + 2N)`` (mean and rstd are saved),
  backward ``e(3·N·d + 2N + 4d)``;
- GELU ``e·2·N·f``, its backward ``e·3·N·f``; residual adds ``e·3·N·d`` (two per layer); in
  backward the same two residual adds plus two more to sum the gradients of q, k and v's
  shared input;
- loss: log-softmax ``e·2·N·V``, NLL ``e·N·V + 8N``; backward ``e·3·N·V`` and ``e·2·N·V + 8N``;
- gradient accumulation into ``.grad`` (``zero_grad(set_to_none=False)`` keeps the tensors):
  one ``add_`` per parameter tensor, ``3·e·P`` for ``P`` parameters;
- SGD with momentum (torch's per-parameter loop): per tensor ``buf.mul_(μ)`` ``2eP``,
  ``buf.add_(g)`` ``3eP``, ``p.add_(buf, -lr)`` ``3eP``, then ``grad.zero_()`` ``eP``: ``9·e·P``
  in all, in four kernels per tensor.

**Data parallel (torch DDP)**: the reducer copies each gradient into its bucket (``2eP``, one
kernel per tensor), our comm hook divides the bucket by ``n`` (``2eP``, one per bucket), the
bucket is ring all-reduced (``2(n-1)/n · B/β + 2(n-1)·α``, `mgpukit.costmodel.comm`), and the
averaged buckets are copied back into ``.grad`` (``2eP``, one per tensor) after backward. The
reducer finalises bucket by bucket — wait on the bucket's future, copy it back
(``Reducer::finalize_backward`` in torch's ``reducer.cpp``; on a GPU the wait is a stream wait)
— so the buckets already reduced are copied back while the last bucket's all-reduce is still
running: of that all-reduce only what outlasts the other buckets' copy-back is exposed. After its first step DDP re-buckets the
gradients in the order backward produced them: a first bucket of about 1 MiB (``lm_head``,
``ln_f``, the last ``fc2``, …), then buckets of up to 25 MiB. A bucket is ready only when
*every* gradient in it is, so the last bucket (it holds the embeddings, the last gradients of
backward) is all-reduced after backward: **its all-reduce is exposed**, less the copy-back
above. ``gpt-tiny``'s 0.85 MB of gradients are one bucket, so its whole all-reduce is exposed;
``gpt-small``'s first 1.1 MB bucket overlaps the rest of backward and hides (only the part that
would outlast backward is charged). Step = forward + backward + DDP copies + exposed
all-reduce + optimizer.

**Pipeline (GPipe / 1F1B)**, ``p`` stages of ``L/p`` layers (stage 0 adds the embedding, the last
the head and loss), ``m`` micro-batches of ``N_mb`` tokens: per-stage forward and backward times
``F_s``, ``B_s`` from the terms above, and one message per boundary and micro-batch (the
activation forward, its gradient back), ``h = α + e·N_mb·d/β``. A rank sends its messages one
after another, so a link is a station of the line too.

- GPipe runs a wave of forwards then a wave of backwards. Identical jobs through a line of
  stations finish after ``Σ stations + (m-1)·max station`` (the bottleneck paces the rest):
  ``Σ_s F_s + (p-1)h + (m-1)·max(max_s F_s, h)``, then the same with ``B_s``. For equal
  stages and ``h = 0``: ``(m + p - 1)(F + B)``, whose idle share is the bubble ``(p-1)/(m+p-1)``.
- 1F1B has the same fill and drain, ``Σ_s (F_s + B_s) + 2(p-1)h + (m-1)·max_s (F_s + B_s)``, but
  cannot hide all the latency: a stage's backward waits on the next stage's backward right
  after it, so round trips stall the steady state. Counting them on the schedule table
  (`mgpukit.costmodel.simulate` with a p2p cost reproduces it exactly for equal stages) gives
  ``2h · (p - 2 + k - ⌊(k + p - 2)/p⌋)`` more for ``k = m - p ≥ 0``: about ``2(p-1)/p · h`` per
  micro-batch. Assumes compute-bound stages (``F_s ≥ h``); with a latency-bound link the
  sends' queueing dominates and this form underestimates.

Rank 0 (whose times the record reports) ends the step with the last backward, then steps its
optimizer over its own stage's parameters.

Not in this form: the host's per-op dispatch time (`op_overhead` by context, and
`collective_launch`). On a CPU worker the emulator adds it to every op; on a GPU profile the
host issues kernels ahead of the device and only its excess shows — nothing for models whose
kernels outlast their launches (gpt2-350m DDP on 8 emulated H100: the host is busy ~41 ms of a
~90 ms step, `mgpukit bench shape`), nearly everything for the tiny GPTs (launch-bound; compare
on `profile.kernels_only()` there, as `mgpukit bench emulation` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from mgpukit.costmodel.comm import allreduce_time, link_for_ranks, p2p_time
from mgpukit.costmodel.hardware import HardwareProfile

FP32 = 4  # bytes per element: the kit trains in fp32
ID = 8  # bytes per token id (int64)
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb=25
DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


@dataclass(frozen=True)
class Op:
    """One kernel: its FLOPs and the bytes it reads + writes."""

    kind: str  # "matmul" | "memory"
    flops: float
    bytes: float

    def seconds(self, profile: HardwareProfile) -> float:
        rate = profile.flops("fp32") * profile.compute_efficiency
        return max(self.flops / rate, self.bytes / profile.memory_bandwidth, profile.min_kernel_time)


def _mem(nbytes: float) -> Op:
    return Op("memory", 0.0, nbytes)


def _linear(n: int, d_in: int, d_out: int, *, bias: bool, e: int = FP32) -> tuple[list[Op], list[Op]]:
    """(forward ops, backward ops) of one linear on ``n`` tokens."""
    flops = 2.0 * n * d_in * d_out
    io = e * (n * d_in + d_in * d_out + n * d_out)
    fwd = [Op("matmul", flops, io + e * d_out * bias)]
    bwd = [Op("matmul", flops, io), Op("matmul", flops, io)]  # dX = dY·W, dW = dYᵀ·X
    if bias:
        bwd.append(_mem(e * (n * d_out + d_out)))  # db = column sum of dY
    return fwd, bwd


def _layer_norm(n: int, d: int, e: int = FP32) -> tuple[list[Op], list[Op]]:
    return [_mem(e * (2 * n * d + 2 * d + 2 * n))], [_mem(e * (3 * n * d + 2 * n + 4 * d))]


def gpt_params(cfg) -> dict[str, int]:
    """Parameter count of `mgpukit.models.gpt.GPT` by part (nothing tied)."""
    d, f, bias = cfg.d_model, cfg.d_ff, int(cfg.bias)
    layer = 4 * (d * d + d * bias) + (d * f + f * bias) + (f * d + d * bias) + 2 * (2 * d)
    return {"embed": cfg.vocab_size * d + cfg.seq_len * d, "layer": layer, "head": 2 * d + d * cfg.vocab_size}


def param_tensors(cfg, *, layers: int, embed: bool, head: bool) -> list[int]:
    """Elements of each parameter tensor of a stage, in the order backward produces their
    gradients (head and ``ln_f``; then per block, last first: fc2, fc1, ``ln_2``, o, v, k, q,
    ``ln_1``, a linear's bias before its weight; then the position and token embeddings).
    Per-tensor ops (accumulation, DDP's bucket copies, the optimizer's loop) are one kernel
    per tensor."""
    d, f, V, T, b = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.seq_len, int(cfg.bias)
    order = [V * d, d, d] if head else []  # lm_head, ln_f
    for _ in range(layers):  # last layer first: fc2, fc1, ln_2, o, v, k, q, ln_1
        order += [d * b, f * d, f * b, d * f, d, d] + [d * b, d * d] * 4 + [d, d]
    if embed:
        order += [T * d, V * d]  # position and token embeddings
    return [p for p in order if p]  # no bias: no tensor


def _per_tensor(numels, bytes_per_element: float) -> list[Op]:
    """One memory-bound kernel per tensor moving ``bytes_per_element`` bytes per element."""
    return [_mem(bytes_per_element * p) for p in numels]


def stage_ops(cfg, batch: int, *, layers: int, embed: bool, head: bool) -> dict:
    """Forward and backward kernels of ``layers`` blocks (plus embedding / head + loss) on
    ``batch`` sequences: ``{"fwd": [Op], "bwd": [Op], "params": int}`` (``bwd`` includes the
    accumulation into ``.grad``)."""
    T, d, f, V, H, e = cfg.seq_len, cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_head, FP32
    n = batch * T
    fwd: list[Op] = []
    bwd: list[Op] = []
    params = 0
    if embed:
        fwd += [_mem(e * (V * d + n * d) + ID * n), _mem(ID * T),  # token lookup, arange
                _mem(e * 2 * T * d + ID * T), _mem(e * (2 * n * d + T * d))]  # position lookup, add
        bwd += [_mem(e * (n * d + T * d)),  # position grad summed over the batch
                _mem(e * (n * d + V * d) + ID * n), _mem(e * 2 * T * d + ID * T)]  # dense scatters
        params += V * d + T * d
    attn = 4.0 * n * T * d  # QKᵀ and AV over all heads, not halved for causality
    for _ in range(layers):
        ln1, ln2 = _layer_norm(n, d), _layer_norm(n, d)
        qkvo = [_linear(n, d, d, bias=cfg.bias) for _ in range(4)]
        fc1, fc2 = _linear(n, d, f, bias=cfg.bias), _linear(n, f, d, bias=cfg.bias)
        residual = _mem(e * 3 * n * d)
        fwd += ln1[0] + [op for lin in qkvo[:3] for op in lin[0]]
        fwd += [Op("matmul", attn, e * (4 * n * d + n * H))] + qkvo[3][0] + [residual]
        fwd += ln2[0] + fc1[0] + [_mem(e * 2 * n * f)] + fc2[0] + [residual]
        bwd += fc2[1] + [_mem(e * 3 * n * f)] + fc1[1] + ln2[1] + [residual]
        bwd += qkvo[3][1] + [Op("matmul", 2.5 * attn, e * (8 * n * d + n * H))]
        bwd += [op for lin in qkvo[:3] for op in lin[1]] + [residual] * 2 + ln1[1] + [residual]
        params += gpt_params(cfg)["layer"]
    if head:
        ln_f = _layer_norm(n, d)
        lm = _linear(n, d, V, bias=False)
        fwd += ln_f[0] + lm[0] + [_mem(e * 2 * n * V), _mem(e * (n * V + 2) + ID * n)]
        bwd = ([_mem(e), _mem(e * (2 * n * V + 2) + ID * n), _mem(e * 3 * n * V)]  # dloss, nll, log-softmax
               + lm[1] + ln_f[1] + bwd)
        params += gpt_params(cfg)["head"]
    tensors = param_tensors(cfg, layers=layers, embed=embed, head=head)
    assert sum(tensors) == params
    bwd += _per_tensor(tensors, 3 * e)  # accumulate into .grad, one add_ per parameter tensor
    return {"fwd": fwd, "bwd": bwd, "params": params, "tensors": tensors}


def _seconds(ops: list[Op], profile: HardwareProfile) -> float:
    return sum(op.seconds(profile) for op in ops)


def sgd_seconds(params, profile: HardwareProfile) -> float:
    """SGD with momentum, torch's per-parameter loop, then ``zero_grad(set_to_none=False)``:
    four kernels per tensor (``mul_`` 2eP, ``add_`` 3eP, ``add_`` 3eP, ``zero_`` eP).
    ``params``: the element count of each tensor (a list), or one number for one flat tensor."""
    numels = [params] if isinstance(params, (int, float)) else list(params)
    return _seconds([op for k in (2, 3, 3, 1) for op in _per_tensor(numels, k * FP32)], profile)


def ddp_buckets(cfg, *, first_bytes: float = DDP_FIRST_BUCKET_BYTES,
                bucket_bytes: float = DDP_BUCKET_BYTES) -> list[float]:
    """Bytes of each DDP bucket, in the order backward fills them (DDP's rebuilt buckets:
    parameters in gradient-ready order; a bucket closes once it reaches its cap)."""
    return [FP32 * sum(bucket) for bucket in _bucket_members(cfg, first_bytes, bucket_bytes)]


def _bucket_members(cfg, first_bytes: float, bucket_bytes: float) -> list[list[int]]:
    """The parameter tensors (element counts, backward order) of each DDP bucket."""
    buckets, current = [], []
    for numel in param_tensors(cfg, layers=cfg.n_layer, embed=True, head=True):
        current.append(numel)
        if FP32 * sum(current) >= (first_bytes if not buckets else bucket_bytes):
            buckets.append(current)
            current = []
    return buckets + ([current] if current else [])


def ddp_step_time(cfg, *, global_batch: int, workers: int, profile: HardwareProfile,
                  first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
                  bucket_bytes: float = DDP_BUCKET_BYTES) -> dict[str, float]:
    """Seconds of one steady-state DDP step of the GPT `cfg` (a `GPTConfig`) on `workers`
    ranks of `profile`, SGD with momentum; see the module docstring for every term.

    Returns ``forward_s``, ``backward_s``, ``ddp_copies_s``, ``allreduce_s`` (all buckets),
    ``exposed_comm_s``, ``optimizer_s``, ``total_s``, and the FLOP/byte totals behind them.
    """
    if global_batch % workers:
        raise ValueError(f"global_batch={global_batch} does not split over {workers} workers.")
    b = global_batch // workers
    ops = stage_ops(cfg, b, layers=cfg.n_layer, embed=True, head=True)
    P = ops["params"]
    link = link_for_ranks(range(workers), profile)
    members = _bucket_members(cfg, first_bucket_bytes, bucket_bytes)
    buckets = [FP32 * sum(bucket) for bucket in members]
    times = [allreduce_time(nbytes, workers, link) for nbytes in buckets]
    backward = _seconds(ops["bwd"], profile)
    # Earlier buckets run while backward goes on, from when the first is ready (the head's
    # and the last fc2's gradients exist) to backward's end; what does not fit is exposed.
    head = stage_ops(cfg, b, layers=0, embed=False, head=True)["bwd"]
    fc2 = _linear(b * cfg.seq_len, cfg.d_ff, cfg.d_model, bias=cfg.bias)[1]
    window = backward - _seconds(head + fc2, profile)
    # DDP's copies (module docstring): each gradient into its bucket, each bucket divided by n,
    # each bucket copied back into the gradients — one kernel per tensor / bucket.
    tensors = ops["tensors"]
    copy_in = _seconds(_per_tensor(tensors, 2 * FP32), profile)
    divide = _seconds([_mem(2 * nbytes) for nbytes in buckets], profile)
    copy_back = _seconds(_per_tensor(tensors, 2 * FP32), profile)
    # The reducer finalises bucket by bucket (wait on its future, copy it back): the buckets
    # already reduced are copied back while the last one's all-reduce is still on the wire.
    copy_back_others = _seconds(_per_tensor([p for bucket in members[:-1] for p in bucket], 2 * FP32), profile)
    exposed = max(0.0, sum(times[:-1]) - window) + max(0.0, times[-1] - copy_back_others)
    out = {
        "forward_s": _seconds(ops["fwd"], profile),
        "backward_s": backward,
        "ddp_copies_s": (copy_in + divide + copy_back) if workers > 1 else 0.0,
        "allreduce_s": sum(times),
        "exposed_comm_s": exposed,
        "optimizer_s": sgd_seconds(tensors, profile),
        "buckets": len(buckets),
        "matmul_flops": sum(op.flops for op in ops["fwd"] + ops["bwd"]),
        "bytes": sum(op.bytes for op in ops["fwd"] + ops["bwd"]),
        "params": P,
    }
    out["total_s"] = sum(out[k] for k in ("forward_s", "backward_s", "ddp_copies_s", "exposed_comm_s", "optimizer_s"))
    return out


def one_f_one_b_stalls(p: int, m: int) -> int:
    """Round trips (``2h`` each) a 1F1B step of ``m ≥ p`` micro-batches on ``p`` stages waits out."""
    k = m - p
    return max(0, p - 2) + k - (k + p - 2) // p


def pipeline_step_time(cfg, *, global_batch: int, micro_batches: int, stages: int,
                       profile: HardwareProfile, schedule: str = "gpipe",
                       stage_layers: tuple[int, ...] | None = None) -> dict[str, float]:
    """Seconds of one GPipe / 1F1B step over `stages` ranks, as rank 0 sees it (module
    docstring, last paragraph): the last micro-batch's backward leaves stage 0, then stage 0
    steps its optimizer. `stage_layers`: layers per stage of an uneven split (default equal)."""
    if schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"schedule={schedule!r}: this closed form covers 'gpipe' and '1f1b'.")
    if stage_layers is None:
        if cfg.n_layer % stages:
            raise ValueError(f"{cfg.n_layer} layers do not split into {stages} stages.")
        stage_layers = (cfg.n_layer // stages,) * stages
    if len(stage_layers) != stages or sum(stage_layers) != cfg.n_layer or min(stage_layers) < 1:
        raise ValueError(f"stage_layers={tuple(stage_layers)!r}: {stages} positive counts adding up to {cfg.n_layer}.")
    if global_batch % micro_batches:
        raise ValueError(f"global_batch={global_batch} does not split into {micro_batches} micro-batches.")
    p, m, mb = stages, micro_batches, global_batch // micro_batches
    per_stage = [stage_ops(cfg, mb, layers=stage_layers[s], embed=s == 0, head=s == p - 1)
                 for s in range(p)]
    fwd = [_seconds(o["fwd"], profile) for o in per_stage]
    bwd = [_seconds(o["bwd"], profile) for o in per_stage]
    hop = p2p_time(FP32 * mb * cfg.seq_len * cfg.d_model, link_for_ranks([0, 1], profile))
    if schedule == "gpipe":  # a wave of forwards, then a wave of backwards
        pipeline = (sum(fwd) + (p - 1) * hop + (m - 1) * max(max(fwd), hop)
                    + sum(bwd) + (p - 1) * hop + (m - 1) * max(max(bwd), hop))
    else:
        if m < p:
            raise ValueError(f"1F1B with m={m} < p={p} micro-batches never reaches its steady state.")
        # fill + drain + steady state, plus the round trips 1F1B cannot hide (see docstring)
        pipeline = (sum(fwd) + sum(bwd) + 2 * (p - 1) * hop
                    + (m - 1) * max(f + b for f, b in zip(fwd, bwd)) + 2 * hop * one_f_one_b_stalls(p, m))
    opt = sgd_seconds(per_stage[0]["tensors"], profile)
    return {"stage_fwd_s": fwd, "stage_bwd_s": bwd, "hop_s": hop, "pipeline_s": pipeline,
            "optimizer_s": opt, "total_s": pipeline + opt,
            "bubble_fraction": (p - 1) / (m + p - 1)}
