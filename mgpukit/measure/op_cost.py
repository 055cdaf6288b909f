"""What one aten op costs on a profiled device: the virtual clock's price list, op by op.

`op_cost` gives an op's kernel its roofline time, `max(flops / (peak · efficiency), bytes /
memory_bandwidth)`, or, where the profile has a ``[gemm]`` table, a GEMM's or a fused attention
kernel's time by its shape (`mgpukit.costmodel.kernels`, as the planner charges it). FLOPs come
from torch's own formulas (`torch.utils.flop_counter.flop_registry`: matmuls, attention,
convs); bytes are the op's input and output tensors.

What an op moves: every tensor it reads plus every tensor it writes (an in-place `add_` reads
and writes its first argument). Two refinements keep that honest: an op that overwrites its
first argument (`copy_`, `zero_`, `fill_`) does not read it, and a `*_like` factory reads only
its argument's shape; views, `_unsafe_view` and allocations move nothing. CPU flash attention
(`_scaled_dot_product_flash_attention_for_cpu`) is charged torch's own attention FLOP formulas
(2 batched matmuls forward, 5 backward).

What the host pays to issue the op is the profile's dispatch time for the op's context
(`op_context`: forward with autograd, backward in the engine, or no_grad) — charged by the
clock (`mgpukit.measure.vclock.VirtualClock.run_op`), not here; `is_host_scalar_op` spots the
CPU scalars a GPU run keeps on the host (no kernel), `is_free` the ops that cost nothing.
"""
from __future__ import annotations

import torch
from torch.utils import flop_counter as _flops
from torch.utils._pytree import tree_flatten

from mgpukit.costmodel.kernels import attention_seconds, gemm_seconds, has_gemm_table
from mgpukit.costmodel.profile import HardwareProfile

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_aten = torch.ops.aten
# Ops that move no data: aliases and allocations (an `empty` is not written).
_FREE = {_aten.detach.default, _aten.empty_like.default, _aten.empty.memory_format,
         _aten.empty_strided.default, _aten._unsafe_view.default, _aten.lift_fresh.default,
         _aten.alias.default}
# Ops torch issues from C++ on its own, not the model's code: autocast's casts and their
# backward (`HardwareProfile.dispatch_overhead`, model_code=False).
_TORCH_INTERNAL = {_aten._to_copy.default}


def is_model_code(func) -> bool:
    """The op is one a model's code issues (or its backward node), not a cast torch issues on
    its own (`HardwareProfile.dispatch_overhead`'s ``model_code``)."""
    return func not in _TORCH_INTERNAL
# Ops that overwrite their first argument without reading it.
_OVERWRITE = {_aten.copy_, _aten.zero_, _aten.fill_, _aten._foreach_zero_, _aten._foreach_copy_}
# Ops that read only the shape of their tensor arguments.
_SHAPE_ONLY = {_aten.zeros_like, _aten.ones_like, _aten.full_like, _aten.new_zeros,
               _aten.new_ones, _aten.new_full, _aten.new_empty}


def _sdpa_cpu_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    return _flops.sdpa_flop_count(query.shape, key.shape, value.shape)


def _sdpa_cpu_backward_flops(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    return _flops.sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


# torch's flop_registry has the CUDA attention kernels; the CPU ones run the same math.
_EXTRA_FLOPS = {_aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops,
                _aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward_flops}


def op_cost(func, args, kwargs, out, profile: HardwareProfile) -> tuple[float, float, float]:
    """(seconds, flops, bytes) of one aten op's kernel on `profile` by the roofline model (the
    host's dispatch time is charged apart: `VirtualClock.run_op`)."""
    packet = func._overloadpacket
    if is_free(func):
        return 0.0, 0.0, 0.0
    kwargs = kwargs or {}
    flops = 0.0
    counter = _flops.flop_registry.get(packet) or _EXTRA_FLOPS.get(packet)
    if counter is not None:
        flops = float(counter(*args, **kwargs, out_val=out))
    outputs = _tensors(out)
    if not outputs and _is_inplace_foreach(func):  # `_foreach_add_` returns nothing: it wrote its first list
        outputs = _tensors(args[0])
    if packet in _SHAPE_ONLY:
        reads = []
    elif packet in _OVERWRITE:
        reads = _tensors((args[1:], kwargs))
    else:
        reads = _tensors((args, kwargs))
    nbytes = float(sum(t.numel() * t.element_size() for t in reads + outputs))
    dtype = next((t.dtype for t in reads + outputs if t.is_floating_point()), torch.float32)
    name = _DTYPE_NAMES.get(dtype, "fp32")
    shaped = _shaped_kernel(func, args, kwargs, name, flops, nbytes, profile)
    if shaped is not None:
        return max(shaped, nbytes / profile.memory_bandwidth), flops, nbytes
    peak = profile.flops(name) * profile.compute_efficiency
    return max(flops / peak, nbytes / profile.memory_bandwidth), flops, nbytes


_GEMMS = {_aten.mm: (0, 1), _aten.addmm: (1, 2), _aten.bmm: (0, 1), _aten.baddbmm: (1, 2)}
_ATTENTION = {_aten._scaled_dot_product_flash_attention_for_cpu,
              _aten._scaled_dot_product_flash_attention_for_cpu_backward,
              _aten._scaled_dot_product_flash_attention, _aten._scaled_dot_product_flash_attention_backward,
              _aten._scaled_dot_product_efficient_attention,
              _aten._scaled_dot_product_efficient_attention_backward}


def _shaped_kernel(func, args, kwargs, dtype: str, flops: float, nbytes: float,
                   profile: HardwareProfile) -> float | None:
    """Seconds of a GEMM or a fused attention kernel by its shape, as the planner charges it
    (`mgpukit.costmodel.kernels`: tile and wave quantisation, the reduction's depth, the
    kernel's latency; attention: the causal tiles skipped) — only where the profile has a
    ``[gemm]`` table for ``dtype`` (GPU profiles); None elsewhere, and the op takes the flat
    roofline (CPU profiles)."""
    packet = func._overloadpacket
    if not flops or not has_gemm_table(profile, dtype):
        return None
    if packet in _GEMMS:
        ia, ib = _GEMMS[packet]
        a, b = args[ia], args[ib]
        batch = a.shape[0] if a.dim() == 3 else 1
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        return gemm_seconds(m, n, k, profile, dtype=dtype, batch=batch)
    if packet in _ATTENTION:  # one fused kernel: (batch · heads) problems of q queries, kv keys
        backward = "backward" in str(packet)
        q, k = (args[1], args[2]) if backward else (args[0], args[1])  # backward: (grad_out, q, k, v, ...)
        return attention_seconds(q.shape[0] * q.shape[1], q.shape[2], k.shape[2], q.shape[3], profile,
                                 dtype=dtype, causal=_argument(func, args, kwargs, "is_causal", False),
                                 backward=backward, nbytes=nbytes)
    return None


def _argument(func, args, kwargs, name: str, default):
    """The value of the argument called `name` in this call of aten op `func` (by its schema)."""
    if kwargs and name in kwargs:
        return kwargs[name]
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            return args[i] if i < len(args) else default
    return default


def _is_inplace_foreach(func) -> bool:
    name = func._overloadpacket.__name__
    return name.startswith("_foreach_") and name.endswith("_")


def is_host_scalar_op(args, kwargs=None) -> bool:
    """An op on 0-dim tensors that carry no autograd history and need none: on a GPU these are
    the CPU scalars torch keeps beside the device tensors — the optimizers' step counters
    (``state["step"]`` is a CPU tensor unless ``capturable`` or ``fused``; Adam's bias
    corrections read it with ``.item()``) — so they run on the host: no kernel, no sync.
    (The emulated run keeps every tensor on the CPU, so the rank is read from the shape.)"""
    tensors = _tensors((args, kwargs or {}))
    return bool(tensors) and all(t.dim() == 0 and not t.requires_grad and t.grad_fn is None for t in tensors)


_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
_ACCUMULATION = {_aten.add_.Tensor, _aten.add.Tensor}  # what AccumulateGrad itself runs: grad += new


def op_context(args=(), kwargs=None, func=None) -> str:
    """Where an op runs: "backward" inside the autograd engine; "forward" where autograd
    records it (grad mode on and an input that requires grad); "no_grad" where nothing is
    recorded (optimizer updates, zeroing gradients, packing buckets).

    An op `func` that a gradient hook issues while the engine runs a leaf's AccumulateGrad node
    — DDP's reducer copying each gradient into its bucket, a comm hook dividing a bucket, the
    kit's own bucketing hooks — is "no_grad": no autograd node of its own, no module code
    around it (the accumulation itself, ``grad += new``, stays "backward")."""
    node = torch._C._current_autograd_node()
    if node is not None:
        hook = func is not None and node.name() == _ACCUMULATE_GRAD and func not in _ACCUMULATION
        return "no_grad" if hook else "backward"
    if torch.is_grad_enabled() and any(t.requires_grad for t in _tensors((args, kwargs or {}))):
        return "forward"
    return "no_grad"


def is_free(func) -> bool:
    """Views, aliases, allocations and non-aten ops (profiler marks, c10d) cost nothing."""
    return func in _FREE or getattr(func, "is_view", False) or func.namespace != "aten"


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]
