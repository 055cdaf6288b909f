"""`fsdp2`: PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`) — ZeRO-3 as PyTorch ships it.

Fully Sharded Data Parallel (Zhao et al. 2023, "PyTorch FSDP: Experiences on Scaling Fully
Sharded Data Parallel", VLDB) is ZeRO stage 3 (Rajbhandari et al. 2020): parameters,
gradients and optimizer states sharded over the data-parallel ranks, each layer all-gathered
before its forward and its backward and its gradient reduce-scattered right after. FSDP2
represents every sharded parameter as a `DTensor` (`Shard(0)` over the dp mesh axis), so the
optimizer steps the local shards and its states are sharded with them. Applied the way
torchtitan does: `fully_shard` on each transformer block, then on the root (embedding, head).

Side by side with our `zero3` (`zero3.py`): the same collectives (per block and micro-batch,
an all-gather in forward, an all-gather and a reduce-scatter in backward), the same 1.5×
DDP's bytes; FSDP2 shards each parameter along dim 0 (padding per parameter) where ours cuts
one flat buffer per block, and it prefetches one block ahead in forward and in backward.

Its collectives run through the kit's `Recorder` (`set_custom_all_gather` /
`set_custom_reduce_scatter`, FSDP2's public hooks for its communication), so they are
counted and timed like ours.

Knob `offload` (`CPUOffloadPolicy`): the sharded parameters, gradients and optimizer states
live in host memory and the optimizer steps there; each all-gather first copies the shard to
the device. On a GPU that trades PCIe copies (and a CPU optimizer step) for GPU memory; on CPU
workers there is nothing to offload to, so it only shows the mechanism.

On GPUs a user would write the same thing through Accelerate
(`FullyShardedDataParallelPlugin(fsdp_version=2)` or `ParallelismConfig(dp_shard_size=N)`);
Accelerate refuses FSDP on CPU workers (MULTI_CPU), so the kit calls torch directly.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn as nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.registry import register
from mgpukit.strategies.sharding.theory import zero_layout, zero_theory


class _Alloc:
    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)


class RecordedAllGather(_Alloc, AllGather):
    """FSDP2's all-gather, run (and counted) by the recorder."""

    def __init__(self, rec):
        self.rec = rec

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        handle = self.rec.all_gather(output_tensor, input_tensor, group=group, async_op=async_op)
        return handle.work if handle is not None else None  # FSDP2 waits on the dist.Work


class RecordedReduceScatter(_Alloc, ReduceScatter):
    """FSDP2's reduce-scatter, run (and counted) by the recorder."""

    def __init__(self, rec):
        self.rec = rec

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        handle = self.rec.reduce_scatter(output_tensor, input_tensor, op=op, group=group,
                                         async_op=async_op)
        return handle.work if handle is not None else None


def layers(module: nn.Module) -> list[nn.Module]:
    """The repeated layers (elements of a `ModuleList` / `ModuleDict`): FSDP2's units."""
    out = []
    for mod in module.modules():
        if isinstance(mod, (nn.ModuleList, nn.ModuleDict)):
            out += [m for m in mod.children() if any(True for _ in m.parameters())]
    return out


def apply_fully_shard(module: nn.Module, mesh, rec, *, offload: bool = False) -> nn.Module:
    """`fully_shard` each layer, then the root, over the 1-D `mesh` (the dp axis)."""
    kw = {"mesh": mesh}
    if offload:  # pinned host memory only makes sense next to a GPU
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")
    for layer in layers(module):
        fully_shard(layer, **kw)
    fully_shard(module, **kw)
    for mod in module.modules():
        if isinstance(mod, FSDPModule):  # every FSDPModule: its collectives via rec
            mod.set_custom_all_gather(RecordedAllGather(rec))
            mod.set_custom_reduce_scatter(RecordedReduceScatter(rec))
    return module


class Fsdp2Sync:
    """FSDP2 reduce-scatters inside backward by itself; the trainer's seams around it."""

    def __init__(self, rec, module):
        self.rec, self.module = rec, module

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)

    @contextlib.contextmanager
    def no_sync(self):
        """Gradient accumulation: keep unsharded gradients, reduce on the last micro-batch."""
        self.module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.module.set_requires_gradient_sync(True)

    def sync(self, step: int) -> None:
        self.rec.wait_all()  # FSDP2 waited for its reduce-scatters; join the clocks to that

    def sharded_parts(self, parts):
        """The optimizer steps the DTensor parameters (their local shards); the weights for
        parity are gathered with `full_tensor()` (untimed bookkeeping)."""
        meter = parts.engine.meter  # `Engine.meter` (None: not metered)
        if meter is not None:
            _weights_are_not_activations(self.module, meter)
        return dataclasses.replace(parts, params=list(self.module.parameters()), grads_sharded=True,
                                   state_dict=self.full_state_dict)

    def full_state_dict(self) -> dict:
        with self.rec.untimed():
            return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().to("cpu", copy=True)
                    for k, v in self.module.state_dict().items()}


def _weights_are_not_activations(module: nn.Module, meter) -> None:
    """While an FSDP module runs forward its parameters are plain tensors in freshly gathered
    buffers; tell the activation meter they are weights (as `zero3.gather` does)."""
    for mod in module.modules():
        if not isinstance(mod, FSDPModule):
            continue
        held = []

        def before(m, args, held=held):  # runs after FSDP2's own pre-forward: gathered now
            held[:] = [p for p in m.parameters() if not hasattr(p, "to_local")]
            for p in held:
                meter.skip(p)

        def after(m, args, output, held=held):
            for p in held:
                meter.skip(p, False)
            held.clear()

        mod.register_forward_pre_hook(before)
        mod.register_forward_hook(after)


def accelerate_plugin(*, offload: bool = False):
    """The same sharding as Accelerate configures it — what a user writes on GPUs:
    ``Accelerator(fsdp_plugin=accelerate_plugin())`` under ``accelerate launch``: FSDP2, one
    unit per GPT `Block` (then the root), parameters resharded after forward. Accelerate
    refuses FSDP on CPU workers, so the kit's runs call `fully_shard` directly (same units)."""
    # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
    from accelerate import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(
        fsdp_version=2, reshard_after_forward=True, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"], cpu_offload=offload)


def apply_fsdp2(module, ctx, rec, cfg):
    """The registry's applier: `fully_shard` over `ctx.mesh["dp"]`, `offload` knob."""
    module = apply_fully_shard(module, ctx.mesh["dp"], rec, offload=STRATEGY.option(cfg, "offload"))
    return module, Fsdp2Sync(rec, module)


STRATEGY = register(
    "fsdp2", family="sharding",
    description="PyTorch FSDP2 fully_shard per block then root over the dp axis (ZeRO-3)",
    layout=zero_layout(3), grad_sync=apply_fsdp2, theory=zero_theory(3),
    knobs=(Knob("offload", bool, False, "CPUOffloadPolicy: shards and optimizer step on the host"),))
