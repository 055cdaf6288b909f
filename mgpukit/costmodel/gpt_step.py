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

**The host** (one convention with the emulator, `mgpukit.measure.vclock`): every op above
carries its context (forward with autograd, backward, no_grad), and the host pays the
profile's dispatch for it (`HardwareProfile.dispatch_overhead`, scaled by
``model_code_factor``: these are the model's and the trainer's ops) before its kernel can start.
On a GPU profile the host runs ahead of the device and a kernel starts when the stream is free
*and* it has been issued (`Stream`, the clock's rule op by op), so a model of small kernels
comes out launch-bound and a large one kernel-bound, as the emulator has it; on a CPU profile
the two add. ``profile.kernels_only()`` drops the host on both sides: kernels alone, labelled so.
GEMMs and the fused attention kernel are timed by their shapes where the profile has a
``[gemm]`` table (`costmodel.kernels`), as the emulator times them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mgpukit.costmodel.comm import allreduce_time, link_for_ranks, p2p_time
from mgpukit.costmodel.profile import HardwareProfile
from mgpukit.costmodel.kernels import attention_seconds, gemm_seconds, has_gemm_table

FP32 = 4  # bytes per element: the kit trains in fp32
ID = 8  # bytes per token id (int64)
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb=25
DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


@dataclass(frozen=True)
class Op:
    """One kernel: its FLOPs and the bytes it reads + writes; ``gemm`` ``(m, n, k, batch)`` or
    ``attention`` ``(batch·heads, queries, keys, head_dim, backward)`` when it has a shape the
    profile times (`costmodel.kernels`, as the emulator does); ``context`` (`vclock.op_context`)
    sets what the host pays to issue it."""

    kind: str  # "matmul" | "memory"
    flops: float
    bytes: float
    gemm: tuple | None = None
    attention: tuple | None = None
    context: str = "forward"

    def seconds(self, profile: HardwareProfile) -> float:
        """The kernel's time on the stream (no host)."""
        floor = max(self.bytes / profile.memory_bandwidth, profile.min_kernel_time)
        if self.gemm is not None and has_gemm_table(profile, "fp32"):
            m, n, k, batch = self.gemm
            return max(gemm_seconds(m, n, k, profile, dtype="fp32", batch=batch), floor)
        if self.attention is not None and has_gemm_table(profile, "fp32"):
            bh, q, kv, hd, backward = self.attention
            return max(attention_seconds(bh, q, kv, hd, profile, dtype="fp32", causal=True, backward=backward,
                                         nbytes=self.bytes), floor)
        return max(self.flops / (profile.flops("fp32") * profile.compute_efficiency), floor)

    def host_seconds(self, profile: HardwareProfile) -> float:
        """What the host pays to issue it (every op here is the model's or the trainer's code)."""
        return profile.dispatch_overhead(self.context, model_code=True)


def _mem(nbytes: float, context: str = "forward") -> Op:
    return Op("memory", 0.0, nbytes, context=context)


def _in(context: str, ops: list[Op]) -> list[Op]:
    return [replace(op, context=context) for op in ops]


def _linear(n: int, d_in: int, d_out: int, *, bias: bool, e: int = FP32) -> tuple[list[Op], list[Op]]:
    """(forward ops, backward ops) of one linear on ``n`` tokens (``addmm``; backward
    ``dX = dY·W`` an ``n × d_in`` GEMM over ``d_out``, ``dW = Xᵀ·dY`` a ``d_in × d_out`` one over
    the ``n`` tokens, as torch's addmm backward computes them)."""
    flops = 2.0 * n * d_in * d_out
    io = e * (n * d_in + d_in * d_out + n * d_out)
    fwd = [Op("matmul", flops, io + e * d_out * bias, gemm=(n, d_out, d_in, 1))]
    bwd = [Op("matmul", flops, io, gemm=(n, d_in, d_out, 1), context="backward"),
           Op("matmul", flops, io, gemm=(d_in, d_out, n, 1), context="backward")]
    if bias:
        bwd.append(_mem(e * (n * d_out + d_out), "backward"))  # db = column sum of dY
    return fwd, bwd


def _layer_norm(n: int, d: int, e: int = FP32) -> tuple[list[Op], list[Op]]:
    return [_mem(e * (2 * n * d + 2 * d + 2 * n))], [_mem(e * (3 * n * d + 2 * n + 4 * d), "backward")]


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


def _per_tensor(numels, bytes_per_element: float, context: str = "no_grad") -> list[Op]:
    """One memory-bound kernel per tensor moving ``bytes_per_element`` bytes per element."""
    return [_mem(bytes_per_element * p, context) for p in numels]


def stage_ops(cfg, batch: int, *, layers: int, embed: bool, head: bool) -> dict:
    """Forward and backward kernels of ``layers`` blocks (plus embedding / head + loss) on
    ``batch`` sequences, in the order the program issues them, each with its op context:
    ``{"fwd": [Op], "bwd": [Op], "params": int}`` (``bwd`` includes the accumulation into
    ``.grad``)."""
    T, d, f, V, H, e = cfg.seq_len, cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_head, FP32
    n = batch * T
    fwd: list[Op] = []
    bwd: list[Op] = []
    params = 0
    if embed:
        fwd += [_mem(e * (V * d + n * d) + ID * n), _mem(ID * T, "no_grad"),  # token lookup, arange
                _mem(e * 2 * T * d + ID * T), _mem(e * (2 * n * d + T * d))]  # position lookup, add
        bwd += _in("backward", [_mem(e * (n * d + T * d)),  # position grad summed over the batch
                                _mem(e * (n * d + V * d) + ID * n), _mem(e * 2 * T * d + ID * T)])  # dense scatters
        params += V * d + T * d
    attn = 4.0 * n * T * d  # QKᵀ and AV over all heads, not halved for causality
    core = (batch * H, T, T, d // H)  # (batch · heads) problems of T queries, T keys
    for _ in range(layers):
        ln1, ln2 = _layer_norm(n, d), _layer_norm(n, d)
        qkvo = [_linear(n, d, d, bias=cfg.bias) for _ in range(4)]
        fc1, fc2 = _linear(n, d, f, bias=cfg.bias), _linear(n, f, d, bias=cfg.bias)
        residual = _mem(e * 3 * n * d)
        residual_b = _mem(e * 3 * n * d, "backward")
        fwd += ln1[0] + [op for lin in qkvo[:3] for op in lin[0]]
        fwd += [Op("matmul", attn, e * (4 * n * d + n * H), attention=(*core, False))] + qkvo[3][0] + [residual]
        fwd += ln2[0] + fc1[0] + [_mem(e * 2 * n * f)] + fc2[0] + [residual]
        bwd += fc2[1] + [_mem(e * 3 * n * f, "backward")] + fc1[1] + ln2[1] + [residual_b]
        bwd += qkvo[3][1] + [Op("matmul", 2.5 * attn, e * (8 * n * d + n * H), attention=(*core, True),
                                context="backward")]
        bwd += [op for lin in qkvo[:3] for op in lin[1]] + [residual_b] * 2 + ln1[1] + [residual_b]
        params += gpt_params(cfg)["layer"]
    if head:
        ln_f = _layer_norm(n, d)
        lm = _linear(n, d, V, bias=False)
        # the loss: the strided target slice is copied contiguous (`reshape`), log-softmax, NLL
        fwd += ln_f[0] + lm[0] + [_mem(2 * ID * n, "no_grad"), _mem(e * 2 * n * V), _mem(e * (n * V + 2) + ID * n)]
        bwd = ([_mem(e)] + _in("backward", [_mem(e * (2 * n * V + 2) + ID * n), _mem(e * 3 * n * V)])  # dloss, nll, log-softmax
               + lm[1] + ln_f[1] + bwd)
        params += gpt_params(cfg)["head"]
    tensors = param_tensors(cfg, layers=layers, embed=embed, head=head)
    assert sum(tensors) == params
    bwd += _per_tensor(tensors, 3 * e, "backward")  # accumulate into .grad, one add_ per parameter tensor
    return {"fwd": fwd, "bwd": bwd, "params": params, "tensors": tensors}


def _seconds(ops: list[Op], profile: HardwareProfile) -> float:
    """The kernels' time alone, back to back (no host)."""
    return sum(op.seconds(profile) for op in ops)


class Stream:
    """The host issuing ``ops`` onto the device stream, by the emulator's rule
    (`measure.vclock.VirtualClock.run_op`): on a GPU profile the host pays each op's dispatch and
    the kernel starts once the stream is free *and* the op is issued; on a CPU worker one core
    dispatches then computes, so the two add. ``host`` and ``device`` are where each has got to."""

    def __init__(self, profile: HardwareProfile):
        self.profile = profile
        self.host = self.device = 0.0

    def run(self, ops: list[Op]) -> float:
        """Issue `ops` in order; returns the device's time when the last one ends."""
        p = self.profile
        for op in ops:
            if p.async_launch:
                self.host += op.host_seconds(p)
                self.device = max(self.device, self.host) + op.seconds(p)
            else:
                self.device += op.host_seconds(p) + op.seconds(p)
                self.host = self.device
        return self.device

    def wait(self, until: float) -> None:
        """The stream waits for something that ends at `until` (a collective); the host does not."""
        self.device = max(self.device, until)

    def sync(self) -> float:
        """The step's end: the host waits for the device."""
        self.host = self.device = max(self.host, self.device)
        return self.device


def stream_seconds(ops: list[Op], profile: HardwareProfile) -> float:
    """Seconds from a synced start until `ops` have run and the host has caught up."""
    stream = Stream(profile)
    stream.run(ops)
    return stream.sync()


def sgd_ops(params) -> list[Op]:
    """SGD with momentum, torch's per-parameter loop (``mul_`` 2eP, ``add_`` 3eP, ``add_`` 3eP per
    tensor), then ``zero_grad(set_to_none=False)`` (``zero_`` eP per tensor): four no_grad kernels
    per tensor. ``params``: the element count of each tensor (a list), or one number."""
    numels = [params] if isinstance(params, (int, float)) else list(params)
    return [op for p in numels for k in (2, 3, 3) for op in _per_tensor([p], k * FP32)] + _per_tensor(numels, FP32)


def sgd_seconds(params, profile: HardwareProfile) -> float:
    """Kernel seconds of `sgd_ops` (no host)."""
    return _seconds(sgd_ops(params), profile)


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
    # DDP's copies (module docstring): each gradient into its bucket and each bucket divided by
    # n during backward; each bucket copied back into the gradients after it — one kernel per
    # tensor / bucket. The reducer finalises bucket by bucket (wait on its future, copy it back):
    # the buckets already reduced are copied back while the last one's all-reduce is on the wire.
    tensors = ops["tensors"]
    many = workers > 1
    # both issued by gradient hooks (the reducer's, the comm hook): no autograd node of their
    # own, so the host pays a no_grad op for each (`vclock.op_context`)
    copy_in = _per_tensor(tensors, 2 * FP32, "no_grad") if many else []
    divide = [_mem(2 * nbytes, "no_grad") for nbytes in buckets] if many else []
    copy_back = _per_tensor(tensors, 2 * FP32, "no_grad") if many else []  # after the engine's last node
    copy_back_others = _per_tensor([p for bucket in members[:-1] for p in bucket], 2 * FP32)
    # Earlier buckets run while backward goes on, from when the first is ready (the head's and
    # the last fc2's gradients exist) to backward's end; what does not fit is exposed.
    head = stage_ops(cfg, b, layers=0, embed=False, head=True)["bwd"][:-len(param_tensors(cfg, layers=0, embed=False, head=True))]
    first = len(head) + len(_linear(b * cfg.seq_len, cfg.d_ff, cfg.d_model, bias=cfg.bias)[1])
    stream = Stream(profile)
    forward = stream.run(ops["fwd"])
    first_ready = stream.run(ops["bwd"][:first])
    backward_end = stream.run(ops["bwd"][first:] + copy_in + divide)
    if many and profile.async_launch:  # the host issues each bucket's all-reduce
        stream.host += len(buckets) * profile.collective_launch
    exposed = (max(0.0, sum(times[:-1]) - (backward_end - first_ready))
               + max(0.0, times[-1] - _seconds(copy_back_others, profile))) if many else 0.0
    stream.wait(backward_end + exposed)
    stream.run(copy_back)
    optimizer = sgd_ops(tensors)
    stream.run(optimizer)
    every = ops["fwd"] + ops["bwd"] + copy_in + divide + copy_back + optimizer
    out = {
        "forward_s": forward,
        "backward_s": backward_end - forward,
        "ddp_copies_s": _seconds(copy_in + divide + copy_back, profile),
        "allreduce_s": sum(times),
        "exposed_comm_s": exposed,
        "optimizer_s": _seconds(optimizer, profile),
        "kernels_s": _seconds(every, profile),
        "host_s": sum(op.host_seconds(profile) for op in every)
                  + (len(buckets) * profile.collective_launch if many else 0.0),
        "buckets": len(buckets),
        "matmul_flops": sum(op.flops for op in ops["fwd"] + ops["bwd"]),
        "bytes": sum(op.bytes for op in ops["fwd"] + ops["bwd"]),
        "params": P,
        "total_s": stream.sync(),
    }
    out["launch_bound"] = out["host_s"] / out["total_s"]
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
    # Each stage's forward and backward of one micro-batch. On a CPU worker the host's dispatch
    # adds to every kernel (`stream_seconds`); on a GPU the host runs ahead of its stream and does
    # not wait for the neighbours' messages (a recv is a stream wait), so the schedule below runs
    # on the kernels alone and a stage's host, issuing all its micro-batches back to back, is a
    # second bound: the step is the later of the two.
    timed = stream_seconds if not profile.async_launch else _seconds
    fwd = [timed(o["fwd"], profile) for o in per_stage]
    bwd = [timed(o["bwd"], profile) for o in per_stage]
    host = [m * sum(op.host_seconds(profile) for op in o["fwd"] + o["bwd"])
            + 2 * m * profile.collective_launch * ((s > 0) + (s < p - 1))  # its sends and recvs
            for s, o in enumerate(per_stage)] if profile.async_launch else [0.0] * p
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
    pipeline = max(pipeline, max(host))
    opt = stream_seconds(sgd_ops(per_stage[0]["tensors"]), profile)
    return {"stage_fwd_s": fwd, "stage_bwd_s": bwd, "stage_host_s": host, "hop_s": hop, "pipeline_s": pipeline,
            "optimizer_s": opt, "total_s": pipeline + opt,
            "bubble_fraction": (p - 1) / (m + p - 1)}
