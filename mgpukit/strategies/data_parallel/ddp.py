"""`ddp`: PyTorch DistributedDataParallel, set up by Accelerate — the production baseline.

`Accelerator.prepare` wraps the model in DDP (NCCL on GPUs, gloo on CPU workers). DDP groups
gradients into ~25 MB buckets and all-reduces each bucket as soon as backward has produced it,
overlapping communication with the rest of backward (Li et al., "PyTorch Distributed", VLDB
2020). A DDP communication hook routes each bucket through the kit's recorder, so its bytes and
timing land in the timeline and the virtual clock models the overlap — the arithmetic is the
same average DDP does by default.
"""
from __future__ import annotations

import torch

from mgpukit.strategies.common import build_model, build_optimizer
from mgpukit.strategies.data_parallel.loop import train_data_parallel
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import register


def recorder_hook(rec, bucket):
    """DDP comm hook: average the bucket with an async all-reduce through the recorder."""
    buffer = bucket.buffer()
    buffer.div_(torch.distributed.get_world_size())
    handle = rec.all_reduce(buffer, async_op=True)
    return handle.get_future().then(lambda fut: fut.value()[0])


@register("ddp", family="data-parallel", description="PyTorch DDP through Accelerate (bucketed, overlapped)",
          theory=dp_theory)
def run_ddp(ctx, rec, cfg):
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    bucket_mb = cfg.options.get("bucket_mb", 25)
    # explicit: `accelerate launch --mixed_precision bf16` exports ACCELERATE_MIXED_PRECISION, and
    # Accelerator() would silently run forward in autocast while the record says fp32
    accelerator = Accelerator(mixed_precision="no",
                              kwargs_handlers=[DistributedDataParallelKwargs(bucket_cap_mb=bucket_mb)])
    rec.extra["mixed_precision"] = accelerator.mixed_precision
    model = build_model(cfg)
    optimizer = build_optimizer(cfg, model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    if hasattr(model, "register_comm_hook"):
        model.register_comm_hook(rec, recorder_hook)

    def sync_grads(step):
        rec.wait_all()  # DDP already waited for its buckets; join the clocks to that moment

    return train_data_parallel(ctx, rec, cfg, model, optimizer, sync_grads=sync_grads,
                               no_sync=lambda: accelerator.no_sync(model),
                               params=model.parameters(), device=accelerator.device)
