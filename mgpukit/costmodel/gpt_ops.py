"""The kernels of one step of mgpukit's GPT, op by op, and the stream the host issues them onto.

These are the pieces of the closed forms in `mgpukit.costmodel.gpt_step` (and of `mgpukit
bench shape`): the same roofline the emulator charges op by op (`mgpukit.measure.vclock`),
written down as formulas in the model's sizes. The general planner
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

from mgpukit.costmodel.kernels import attention_seconds, gemm_seconds, has_gemm_table
from mgpukit.costmodel.profile import HardwareProfile

FP32 = 4  # bytes per element: the kit trains in fp32
ID = 8  # bytes per token id (int64)


@dataclass(frozen=True)
class Op:
    """One kernel: its FLOPs and the bytes it reads + writes; ``gemm`` ``(m, n, k, batch)`` or
    ``attention`` ``(batch·heads, queries, keys, head_dim, backward)`` when it has a shape the
    profile times (`costmodel.kernels`, as the emulator does); ``context`` (`op_cost.op_context`)
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


def memory_op(nbytes: float, context: str = "forward") -> Op:
    return Op("memory", 0.0, nbytes, context=context)


def _in(context: str, ops: list[Op]) -> list[Op]:
    return [replace(op, context=context) for op in ops]


def linear_ops(n: int, d_in: int, d_out: int, *, bias: bool, e: int = FP32) -> tuple[list[Op], list[Op]]:
    """(forward ops, backward ops) of one linear on ``n`` tokens (``addmm``; backward
    ``dX = dY·W`` an ``n × d_in`` GEMM over ``d_out``, ``dW = Xᵀ·dY`` a ``d_in × d_out`` one over
    the ``n`` tokens, as torch's addmm backward computes them)."""
    flops = 2.0 * n * d_in * d_out
    io = e * (n * d_in + d_in * d_out + n * d_out)
    fwd = [Op("matmul", flops, io + e * d_out * bias, gemm=(n, d_out, d_in, 1))]
    bwd = [Op("matmul", flops, io, gemm=(n, d_in, d_out, 1), context="backward"),
           Op("matmul", flops, io, gemm=(d_in, d_out, n, 1), context="backward")]
    if bias:
        bwd.append(memory_op(e * (n * d_out + d_out), "backward"))  # db = column sum of dY
    return fwd, bwd


def _layer_norm(n: int, d: int, e: int = FP32) -> tuple[list[Op], list[Op]]:
    return [memory_op(e * (2 * n * d + 2 * d + 2 * n))], [memory_op(e * (3 * n * d + 2 * n + 4 * d), "backward")]


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


def per_tensor_ops(numels, bytes_per_element: float, context: str = "no_grad") -> list[Op]:
    """One memory-bound kernel per tensor moving ``bytes_per_element`` bytes per element."""
    return [memory_op(bytes_per_element * p, context) for p in numels]


def stage_ops(cfg, batch: int, *, layers: int, embed: bool, head: bool, accumulate: bool = True) -> dict:
    """Forward and backward kernels of ``layers`` blocks (plus embedding / head + loss) on
    ``batch`` sequences, in the order the program issues them, each with its op context:
    ``{"fwd": [Op], "bwd": [Op], "params": int}`` (``bwd`` includes the accumulation into
    ``.grad``; ``accumulate=False``: none, the gradients were freed after the last step and
    autograd hands each fresh one over, as in the kit's one replica and torch DDP)."""
    T, d, f, V, H, e = cfg.seq_len, cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_head, FP32
    n = batch * T
    fwd: list[Op] = []
    bwd: list[Op] = []
    params = 0
    if embed:
        fwd += [memory_op(e * (V * d + n * d) + ID * n), memory_op(ID * T, "no_grad"),  # token lookup, arange
                memory_op(e * 2 * T * d + ID * T), memory_op(e * (2 * n * d + T * d))]  # position lookup, add
        bwd += _in("backward", [memory_op(e * (n * d + T * d)),  # position grad summed over the batch
                                memory_op(e * (n * d + V * d) + ID * n), memory_op(e * 2 * T * d + ID * T)])  # dense scatters
        params += V * d + T * d
    attn = 4.0 * n * T * d  # QKᵀ and AV over all heads, not halved for causality
    core = (batch * H, T, T, d // H)  # (batch · heads) problems of T queries, T keys
    for _ in range(layers):
        ln1, ln2 = _layer_norm(n, d), _layer_norm(n, d)
        qkvo = [linear_ops(n, d, d, bias=cfg.bias) for _ in range(4)]
        fc1, fc2 = linear_ops(n, d, f, bias=cfg.bias), linear_ops(n, f, d, bias=cfg.bias)
        residual = memory_op(e * 3 * n * d)
        residual_b = memory_op(e * 3 * n * d, "backward")
        fwd += ln1[0] + [op for lin in qkvo[:3] for op in lin[0]]
        fwd += [Op("matmul", attn, e * (4 * n * d + n * H), attention=(*core, False))] + qkvo[3][0] + [residual]
        fwd += ln2[0] + fc1[0] + [memory_op(e * 2 * n * f)] + fc2[0] + [residual]
        bwd += fc2[1] + [memory_op(e * 3 * n * f, "backward")] + fc1[1] + ln2[1] + [residual_b]
        bwd += qkvo[3][1] + [Op("matmul", 2.5 * attn, e * (8 * n * d + n * H), attention=(*core, True),
                                context="backward")]
        bwd += [op for lin in qkvo[:3] for op in lin[1]] + [residual_b] * 2 + ln1[1] + [residual_b]
        params += gpt_params(cfg)["layer"]
    if head:
        ln_f = _layer_norm(n, d)
        lm = linear_ops(n, d, V, bias=False)
        # the loss: the strided target slice is copied contiguous (`reshape`), log-softmax, NLL
        fwd += ln_f[0] + lm[0] + [memory_op(2 * ID * n, "no_grad"), memory_op(e * 2 * n * V), memory_op(e * (n * V + 2) + ID * n)]
        bwd = ([memory_op(e)] + _in("backward", [memory_op(e * (2 * n * V + 2) + ID * n), memory_op(e * 3 * n * V)])  # dloss, nll, log-softmax
               + lm[1] + ln_f[1] + bwd)
        params += gpt_params(cfg)["head"]
    tensors = param_tensors(cfg, layers=layers, embed=embed, head=head)
    assert sum(tensors) == params
    if accumulate:
        bwd += per_tensor_ops(tensors, 3 * e, "backward")  # accumulate into .grad, one add_ per parameter tensor
    return {"fwd": fwd, "bwd": bwd, "params": params, "tensors": tensors}


def kernel_seconds(ops: list[Op], profile: HardwareProfile) -> float:
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


def sgd_ops(params, *, foreach: bool = False, zero: bool = True) -> list[Op]:
    """SGD with momentum (``mul_`` 2eP, ``add_`` 3eP, ``add_`` 3eP), then
    ``zero_grad(set_to_none=False)`` (``zero_`` eP): four no_grad kernels per tensor in torch's
    per-parameter loop (what it runs on CPU tensors), or four in all with ``foreach`` (one
    multi-tensor kernel per operation over every tensor: torch's default on GPUs, and what the
    kit builds for emulated GPUs, `training.building.build_optimizer`). ``params``: the element
    count of each tensor (a list), or one number. ``zero=False``: the gradients are freed
    instead (``set_to_none=True``: what the kit's trainer does for one replica and torch DDP,
    `training.trainer`), no ``zero_``."""
    numels = [params] if isinstance(params, (int, float)) else list(params)
    if foreach:
        return [memory_op(k * FP32 * sum(numels), "no_grad") for k in ((2, 3, 3, 1) if zero else (2, 3, 3))]
    return ([op for p in numels for k in (2, 3, 3) for op in per_tensor_ops([p], k * FP32)]
            + (per_tensor_ops(numels, FP32) if zero else []))


def sgd_seconds(params, profile: HardwareProfile) -> float:
    """Kernel seconds of `sgd_ops` (no host), as the profile's device runs it."""
    return kernel_seconds(sgd_ops(params, foreach=profile.async_launch), profile)
