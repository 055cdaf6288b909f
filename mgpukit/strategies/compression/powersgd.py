"""`dp-powersgd`: low-rank gradients with PyTorch's own PowerSGD hook on DDP (via Accelerate).

The idea (Vogels, Karimireddy & Jaggi 2019, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization"). A weight gradient M (rows × cols) is close to a
low-rank matrix. One step of power iteration, warm-started from last step's Q, finds a
rank-r approximation M ≈ P Qᵀ with only all-reduces (so, unlike top-k, it sums like a dense
gradient):

    P = M Q            all-reduce P  (rows × r)      then orthonormalise P
    Q = Mᵀ P           all-reduce Q  (cols × r)      mean ≈ P Qᵀ / n

r(rows + cols) numbers instead of rows·cols — 16× fewer for a 64×64 matrix at r = 2. Vectors
(biases, norms) and matrices too small to gain (rows·cols ≤ 2·r(rows + cols)) are all-reduced
uncompressed. Error feedback keeps M − P Qᵀ for the next step, as in top-k.

This strategy does not re-implement it: `Accelerator.prepare` wraps the model in DDP and
`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook` runs on each gradient bucket.
Knobs: `cfg.options["rank"]` (r, default 2) and `cfg.options["start_iter"]` (dense all-reduce
steps first, default 2 — the least torch allows with error feedback: DDP rebuilds its buckets
after the first step).

**Counting its bytes.** The hook calls `dist.all_reduce(..., group=state.process_group)`
itself, and Accelerate's own `comm_hook=POWER_SGD` option hands it the world group, which no
recorder sees. So the hook gets a `RecordedGroup` instead: a `torch.distributed.ProcessGroup`
subclass whose `allreduce` runs `rec.all_reduce` on the real group. Every tensor the hook
all-reduces (the uncompressed tensors, then P, then Q) is therefore counted exactly, from the
tensors themselves; nothing is estimated. The price: each all-reduce completes before the
hook continues (synchronous, in the backward thread), so the hook's communication does not
overlap the rest of backward — on gpt-tiny DDP has a single bucket, so there was nothing
left to overlap anyway. Accelerate's `comm_hook` path would be the production choice.

Shape mode (`mgpukit.measure.shape`): torch's DDP is built over a fake process group as `ddp`
does there (`shape_ddp_module`), the same hook on the same recorded group: P and Q have their
shapes, so the bytes are the real run's (tests/test_shape_mode.py).

Collectives: none in forward; in backward, per bucket, three all-reduces (uncompressed,
P, Q) — 2(n-1)/n · 4(Σ r(rows + cols) + uncompressed) bytes per rank.
Lossy: the loss curve is compared with the fp32 reference at `LOSS_RTOL`, not elementwise.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from mgpukit.strategies.compression.common import loss_curve_check, track_step_bytes
from mgpukit.strategies.compression.theory import DEFAULTS, compression_theory, knobs_of
from mgpukit.strategies.data_parallel.ddp import shape_ddp_module
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.policies.precision import accelerate_precision
from mgpukit.strategies.registry import register

LOSS_RTOL = 0.10  # final loss within 10 % of the fp32 reference's (see parity.py)


class _DoneWork(dist.Work):
    """A finished collective: what `RecordedGroup.allreduce` returns (the data already moved)."""

    def __init__(self, tensors):
        super().__init__()
        self._future = torch.futures.Future()
        self._future.set_result(tensors)

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        return self._future


class RecordedGroup(dist.ProcessGroup):
    """A process group that runs every all-reduce through the recorder, on the real `group`.

    Only `allreduce` is forwarded — all a DDP comm hook like PowerSGD's uses; any other
    collective on this group raises (torch does not know the group) rather than going uncounted.
    """

    def __init__(self, rec, group=None):
        self.group = group if group is not None else dist.group.WORLD
        super().__init__(dist.get_rank(self.group), dist.get_world_size(self.group))
        self.rec = rec

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for tensor in tensors:
            self.rec.all_reduce(tensor, op=op, group=self.group)  # synchronous: counted and timed
        return _DoneWork(tensors)


class PowerSgdSync:
    """The hook averaged the gradients during backward; `sync` counts the step's bytes."""

    def __init__(self, rec, accelerator, model):
        self.accelerator, self.model = accelerator, model
        self.mark = track_step_bytes(rec)

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        if self.accelerator is None:  # shape mode: DDP without Accelerate
            return self.model.no_sync()
        return self.accelerator.no_sync(self.model)

    def sync(self, step: int) -> None:
        self.mark()


def apply_powersgd(module, ctx, rec, cfg):
    """The applier: DDP (through Accelerate) with torch's PowerSGD hook on a recorded group."""
    if rec.shape:  # fake tensors: torch's DDP over a fake group, as `ddp` does in shape mode

        accelerator, model = None, shape_ddp_module(module, ctx, rec, "dp-powersgd")
    else:
        # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
        from accelerate import Accelerator

        # the layout's dtype, not ACCELERATE_MIXED_PRECISION's (see ddp)
        accelerator = Accelerator(mixed_precision=accelerate_precision(ctx.layout.dtype))
        rec.extra["mixed_precision"] = accelerator.mixed_precision
        model = accelerator.prepare(module)
    if isinstance(model, DistributedDataParallel):  # DDP-wrapped (more than one worker)
        state = PowerSGDState(process_group=RecordedGroup(rec), matrix_approximation_rank=
                              knobs_of("powersgd", cfg.options)["rank"],
                              start_powerSGD_iter=cfg.options.get("start_iter", 2),
                              random_seed=cfg.seed)
        model.register_comm_hook(state, powerSGD_hook)
    return model, PowerSgdSync(rec, accelerator, model)


def _validate(cfg, dims) -> None:
    if dims.dp != dims.world_size:
        raise ValueError(f"dp-powersgd runs on DDP over the whole launched group; with "
                         f"{dims.as_dict()} use a hand-written compressor (dp-int8, dp-topk) for dp × pp.")


register("dp-powersgd", family="compression", reference="single", compare=loss_curve_check(LOSS_RTOL),
         description="PowerSGD low-rank gradients (torch's DDP comm hook, via Accelerate)",
         grad_sync=apply_powersgd, validate=_validate, theory=compression_theory("powersgd"),
         knobs=(Knob("rank", int, DEFAULTS["powersgd"]["rank"], "rank r of the approximation", minimum=1),
                Knob("start_iter", int, 2, "dense all-reduce steps before PowerSGD starts", minimum=1)))
