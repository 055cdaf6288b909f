"""What the compression strategies share: one flat gradient, one exchange, bytes per step.

Every hand-written compressor here (`dp-fp16`, `dp-bf16`, `dp-int8`, `dp-topk`) runs the plain
data-parallel step (every rank holds the whole model): forward, backward, then, instead of
an fp32 all-reduce,

    flat (P,) fp32 --compress--> payload --collective (recorder)--> payloads --decompress--> mean (P,)

and writes the mean back into `.grad` before the optimizer step. Only `exchange(flat) -> mean`
differs between methods. The collective goes through the `Recorder`, so `bytes_sent` and
`payload_bytes` are measured from the tensors actually handed to gloo/NCCL; compression and
decompression run inside `rec.compute("compress" | "decompress")`, so their cost shows on the
timeline (and on the virtual clock in emulated mode).

`track_step_bytes` writes the recorder's byte counters per step into `record["extra"]`:
`bytes_sent_per_step` is what the notebook and the tests compare with the prediction (the
totals in `record["comm"]` also hold warm-up steps, e.g. PowerSGD's dense first steps).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from mgpukit.strategies.compression.parity import loss_parity


def flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """All gradients as one fp32 vector (P,), parameters in model order."""
    return torch.cat([p.grad.reshape(-1) for p in params])


def write_grads(params: list[torch.nn.Parameter], flat: torch.Tensor) -> None:
    """Copy the flat vector (P,) back into each parameter's `.grad`."""
    offset = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def track_step_bytes(rec) -> Callable[[], None]:
    """A function to call once per step: appends that step's bytes to `rec.extra`.

    Reads the recorder's own counters (the bytes of the tensors the backend received), so a
    step's figure includes every collective of the step — the hand-written exchange, or the
    DDP hook's all-reduces that ran during backward.
    """
    rec.extra["bytes_sent_per_step"] = []
    rec.extra["payload_bytes_per_step"] = []
    last = {"sent": rec.bytes_sent, "payload": rec.payload_bytes}

    def mark():
        rec.extra["bytes_sent_per_step"].append(rec.bytes_sent - last["sent"])
        rec.extra["payload_bytes_per_step"].append(rec.payload_bytes - last["payload"])
        last["sent"], last["payload"] = rec.bytes_sent, rec.payload_bytes

    return mark


Exchange = Callable[[torch.Tensor], torch.Tensor]  # flat gradient (P,) -> mean over ranks (P,)


class CompressedSync:
    """The gradient sync of every compressor: flat gradient -> `exchange` -> mean, per step."""

    def __init__(self, rec, params, exchange: Exchange, group):
        self.params, self.exchange, self.group = params, exchange, group
        self.mark = track_step_bytes(rec)

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return contextlib.nullcontext()  # backward never communicates by itself

    def sync(self, step: int) -> None:
        write_grads(self.params, self.exchange(flat_grads(self.params)))
        self.mark()


def compressed_sync(build_exchange: Callable[..., Exchange]):
    """A registry `grad_sync` applier from `build_exchange(params, group, cfg) -> exchange`.

    The exchange runs its own collectives through `rec`, over the dp group; the model is not
    DDP-wrapped, so nothing else communicates. `build_exchange` runs once the model exists
    (top-k sizes its k and its residual from the parameters)."""

    def apply(module, ctx, rec, cfg):
        params = [p for p in module.parameters() if p.requires_grad]
        group = ctx.group("dp")
        return module, CompressedSync(rec, params, build_exchange(params, rec, group, cfg), group)

    return apply


def steady_bytes_per_step(record: dict, rank: str = "0", *, skip: int = 0) -> float:
    """Mean bytes sent per step by `rank`, measured, after `skip` warm-up steps.

    Falls back to the run's total over its step count when the record has no per-step figures
    (a strategy outside this family, e.g. `ddp`).
    """
    per_step = (record.get("extra", {}).get(rank) or {}).get("bytes_sent_per_step")
    if per_step:
        steady = per_step[skip:] or per_step
        return float(sum(steady)) / len(steady)
    steps = len(record["losses"])
    return float(record["comm"][rank]["bytes_sent"]) / steps


def loss_curve_check(rtol: float) -> Callable:
    """A registry `compare` for lossy methods: the final loss within `rtol` of the reference's
    (see `parity.loss_parity`; a `tolerance` with its own "rtol" overrides it); elementwise fp32
    parity cannot hold when numbers change on purpose."""

    def check(record, weights, ref, tolerance):
        return loss_parity(record, ref["record"], rtol=(tolerance or {}).get("rtol", rtol))

    return check
