"""`ddp`: PyTorch DistributedDataParallel, set up by Accelerate — the production baseline.

`Accelerator.prepare` wraps the model in DDP (NCCL on GPUs, gloo on CPU workers). DDP groups
gradients into ~25 MB buckets and all-reduces each bucket as soon as backward has produced it,
overlapping communication with the rest of backward (Li et al., "PyTorch Distributed", VLDB
2020). A DDP communication hook routes each bucket through the kit's recorder, so its bytes and
timing land in the timeline and the virtual clock models the overlap — the arithmetic is the
same average DDP does by default.

Shape mode (fake tensors, `mgpukit.measure.shape`): torch's DDP is built directly (what
`Accelerator.prepare` builds on CPU workers) over a fake process group, with `init_sync=False`:
its constructor's cross-rank checks and its bucket rebuild would send the (absent) data. The
buckets still go through the recorder's hook, so their time and bytes are modelled. One
difference: the reducer's bucket *rebuild* after the first step (the buckets of every later
step: gradient-ready order, `bucket_mb` caps) fills an index tensor in C++, which a fake tensor
cannot hold, so shape mode never rebuilds. Left alone, that would keep torch's *first-step*
assignment for every step — since torch 2.x one bucket holding every gradient (DDP does not
trust registration order until it has seen a backward), all-reduced after backward, fully
exposed: a steady state real DDP never has. So shape mode hands DDP its caps as a per-bucket
list (`bucket_cap_mb_list`), and the initial assignment already cuts `bucket_mb` buckets, in
reverse parameter order — for a GPT the order backward produces them in (head, last block …
first block, embeddings), so the buckets overlap backward as the rebuilt ones do; only where
the cuts fall differs (counted from the embedding end instead of the head end).
"""
from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from mgpukit.measure.shape import fake_group
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.policies.precision import accelerate_precision
from mgpukit.strategies.registry import register


def recorder_hook(rec, bucket):
    """DDP comm hook: average the bucket with an async all-reduce through the recorder."""
    buffer = bucket.buffer()
    # DDP through Accelerate reduces over the whole launched group (see `_validate`)
    buffer.div_(torch.distributed.get_world_size())
    handle = rec.all_reduce(buffer, async_op=True)
    return handle.get_future().then(lambda fut: fut.value()[0])


class DdpSync:
    """DDP all-reduces during backward by itself; `sync` only joins the clocks to its end."""

    # DDP copies gradients into its own buckets (`gradient_as_bucket_view=False`, Accelerate's
    # default): `.grad` may be freed between steps (`zero_grad(set_to_none=True)`, trainer.py)
    frees_grads = True
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def __init__(self, rec, accelerator, model):
        self.rec, self.accelerator, self.model = rec, accelerator, model

    def no_sync(self):
        if self.accelerator is None:  # shape mode: DDP without Accelerate
            return self.model.no_sync()
        return self.accelerator.no_sync(self.model)

    def sync(self, step: int) -> None:
        self.rec.wait_all()  # DDP already waited for its buckets; join the clocks to that moment


def apply_ddp(module, ctx, rec, cfg):
    """The applier: `Accelerator.prepare` wraps `module` in DDP over the launched group, with
    the recorder as its communication hook."""
    if rec.shape:  # before importing Accelerate, which shape mode does not use (~1.5 s per rank)
        return _shape_ddp(module, ctx, rec, cfg)
    # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs  # lazy: as the line above

    # explicit: `accelerate launch --mixed_precision bf16` exports ACCELERATE_MIXED_PRECISION, and
    # Accelerator() would silently run forward in autocast while the record says fp32; the
    # layout's dtype is the one policy (`strategies.policies.precision` autocasts the pieces too)
    accelerator = Accelerator(mixed_precision=accelerate_precision(ctx.layout.dtype), kwargs_handlers=[DistributedDataParallelKwargs(
        bucket_cap_mb=STRATEGY.option(cfg, "bucket_mb"))])
    rec.extra["mixed_precision"] = accelerator.mixed_precision
    model = accelerator.prepare(module)
    if isinstance(model, DistributedDataParallel):  # more than one worker
        model.register_comm_hook(rec, recorder_hook)
    return model, DdpSync(rec, accelerator, model)


def _shape_ddp(module, ctx, rec, cfg):
    """Shape mode: torch's DDP over a fake process group (module docstring)."""
    model = shape_ddp_module(module, ctx, rec, "ddp", bucket_mb=STRATEGY.option(cfg, "bucket_mb"))
    model.register_comm_hook(rec, recorder_hook)
    return model, DdpSync(rec, None, model)


def shape_ddp_module(module, ctx, rec, strategy: str, *, bucket_mb: float = 25):
    """torch's DDP for shape mode: over a fake process group, no initial sync, buckets never
    rebuilt (module docstring); fp32 only. The caller registers the comm hook that does the
    timed traffic."""
    if ctx.layout.dtype != "fp32":
        raise ValueError(f"{strategy} in shape mode trains in fp32 only (Accelerate's autocast is not applied).")
    rec.extra["mixed_precision"] = "no"

    model = DistributedDataParallel(module, process_group=fake_group(), bucket_cap_mb=bucket_mb,
                                    bucket_cap_mb_list=[bucket_mb], init_sync=False)  # steady-state buckets
    model.reducer = _KeepBuckets(model.reducer)
    return model


class _KeepBuckets:
    """DDP's reducer, except that it never rebuilds its buckets (module docstring)."""

    def __init__(self, reducer):
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


def _validate(cfg, dims) -> None:
    if dims.dp != dims.world_size:
        raise ValueError(f"ddp wraps the whole launched group (Accelerate's DDP); with "
                         f"{dims.as_dict()} it cannot stand on the dp axis alone. Use dp-bucketed "
                         f"or dp-naive to combine data parallelism with pp.")


STRATEGY = register(
    "ddp", family="data-parallel", description="PyTorch DDP through Accelerate (bucketed, overlapped)",
    grad_sync=apply_ddp, theory=dp_theory, validate=_validate,
    knobs=(Knob("bucket_mb", float, 25.0, "bucket size in MB (bucket_cap_mb)", minimum=0),))
