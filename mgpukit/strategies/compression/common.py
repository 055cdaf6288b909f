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

from collections.abc import Callable

import torch

from mgpukit.strategies.common import build_model, build_optimizer, data_parallel_loop


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


def compressed_dp(ctx, rec, cfg, build_exchange: Callable[[list], Exchange]):
    """Train data-parallel with `exchange(flat_grad (P,)) -> mean_grad (P,)` as the gradient sync.

    `build_exchange(params)` makes the exchange once the model exists (top-k sizes its k and
    its residual from the parameters). The exchange runs its own collectives through
    `rec`; the model is not DDP-wrapped, so nothing else communicates. Returns what
    `data_parallel_loop` returns (rank 0: the weights).
    """
    model = build_model(cfg).to(ctx.device)
    optimizer = build_optimizer(cfg, model.parameters())
    params = [p for p in model.parameters() if p.requires_grad]
    exchange = build_exchange(params)
    mark = track_step_bytes(rec)

    def sync_grads(step):
        if ctx.world_size > 1:
            write_grads(params, exchange(flat_grads(params)))
        mark()

    return data_parallel_loop(ctx, rec, cfg, model, optimizer, sync_grads=sync_grads, params=params)


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
    (see `parity.loss_parity`); elementwise fp32 parity cannot hold when numbers change on purpose."""

    def check(record, weights, ref, tolerance):
        from mgpukit.strategies.compression.parity import loss_parity

        return loss_parity(record, ref["record"], rtol=rtol)

    return check
