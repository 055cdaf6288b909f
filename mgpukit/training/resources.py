"""What a run needs from this machine's memory, checked before anything launches.

A global batch of 10^11 rows used to launch and then fail in a rank (`RuntimeError: ... tried
to allocate 800 GB`): every rank draws every row's random offset (`mgpukit.data.get_batch`: the
global batch's stream must be identical on every rank), so the batch alone needs
``8 · global_batch`` bytes per rank. `check_memory` adds up a *lower bound* of what the workers
of this machine will allocate — the batch's offsets, this rank's token windows, one
micro-batch's logits (GPT), or the global batch's inputs and targets (MLP), and a floor per
worker process — and refuses the run in one sentence when even that exceeds the machine's
memory. It never refuses a run that would fit: every term is an underestimate (activations,
weights, optimizer state and allocator slack come on top). Shape mode allocates nothing.
"""
from __future__ import annotations

import psutil

# A forked worker's own pages at the least (its interpreter state, gloo's buffers, the
# allocations of its first step): far below the ~0.3-0.5 GB a worker really uses here.
WORKER_FLOOR_BYTES = 64 * 2**20
_TEACHER = 64  # the MLP data's teacher width (mgpukit.data.mlp_batch)


def batch_bytes(cfg, data_ranks: int) -> int:
    """A lower bound of the bytes one rank allocates for one step's data (module docstring)."""
    rows = max(1, cfg.global_batch // max(1, data_ranks))
    mc = cfg.model_config()
    if cfg.is_gpt:
        offsets = 8 * cfg.global_batch  # int64, every row of the global batch, on every rank
        windows = 8 * rows * (mc.seq_len + 1) * 2  # int64 window indices and the gathered tokens
        logits = 4 * max(1, rows // cfg.micro_batches) * mc.seq_len * mc.vocab_size  # one micro-batch
        return offsets + windows + logits
    # every rank draws the whole global batch, runs the teacher on it, then keeps its rows
    return 4 * cfg.global_batch * (mc.d_in + _TEACHER + mc.d_out)


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_memory(cfg, workers: int, data_ranks: int, *, shape: bool = False, memory_bytes=None) -> None:
    """ValueError when `workers` ranks of `cfg` cannot fit in this machine's memory."""
    if shape:  # fake tensors: nothing is allocated
        return
    total = memory_bytes if memory_bytes is not None else psutil.virtual_memory().total
    per_rank = batch_bytes(cfg, data_ranks)
    need = workers * (per_rank + WORKER_FLOOR_BYTES)
    if need <= total:
        return
    if per_rank > WORKER_FLOOR_BYTES:
        what = "rows" if not cfg.is_gpt else "sequences"
        raise ValueError(
            f"global_batch={cfg.global_batch} needs at least {_gib(per_rank)} per worker for its data alone "
            f"({_gib(need)} for {workers} worker(s)), and this machine has {_gib(total)} of memory; "
            f"use fewer {what} per step (--global-batch), or more --micro-batches.")
    raise ValueError(f"{workers} workers need at least {_gib(need)} of memory ({_gib(WORKER_FLOOR_BYTES)} "
                     f"each, at the very least), and this machine has {_gib(total)}; use fewer --workers.")
