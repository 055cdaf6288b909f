"""Mixed precision as a policy: 16-bit compute, fp32 master weights (Micikevicius et al. 2018,
"Mixed Precision Training").

The parameters stay fp32 — they *are* the master weights the optimizer updates. Each piece of
the model (the GPT's embedding, every block, the head; an MLP's layers) runs its forward under
`torch.autocast`: matmuls in bf16 (or fp16), reductions and norms in fp32, and each piece hands
fp32 on (the residual stream, the pipeline's boundary tensors and the logits the loss reads stay
fp32 — Accelerate's `convert_outputs_to_fp32`, FSDP2's `output_dtype`). Gradients arrive in
fp32 (autocast's casts are differentiable), so every gradient sync and optimizer works unchanged.

Memory, per parameter with Adam: 4 (fp32 master) + 4 (fp32 gradient) + 8 (Adam m, v) = 16 bytes
— the same 16Ψ as ZeRO's table (2 + 2 + 12, `costmodel.memory`), split differently: autocast
has no persistent 16-bit weight copy; it casts each weight once per forward region and keeps
that copy for backward, so the "2Ψ" of 16-bit weights shows up among the saved activations,
per micro-batch in flight. The activations themselves are mostly 16-bit.

bf16 keeps fp32's exponent range: no loss scaling. fp16 (5 exponent bits) flushes small
gradients to zero, so its loss is multiplied by a scale S before backward and the gradients
divided by S before the step (`LossScaler`, dynamic: halve S and skip the step when a gradient
overflows, double it after `growth_interval` clean steps — Micikevicius et al. 2018 §3.2, the
rule of `torch.amp.GradScaler`). Collectives: none for bf16; fp16 adds one 4-byte all-reduce
(max) of the overflow flag per step over the world, so every rank — every pipeline stage —
skips the same steps.
"""
from __future__ import annotations

import functools

import torch
import torch.nn as nn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ACCELERATE = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}  # Accelerator(mixed_precision=...)


def check_precision(dtype: str) -> None:
    """Refuse, saying what to change, a precision this run cannot apply."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; choose one of {', '.join(DTYPES)}.")


class LossScaler:
    """Dynamic loss scaling for fp16 (module docstring). The engines backpropagate
    `scaled(loss_fn)`; the trainer calls `unscale_` after the gradient sync (False: skip the
    optimizer step) and `update` after the step."""

    def __init__(self, rec, group, *, init_scale: float = 2.0 ** 16, growth_interval: int = 2000,
                 growth: float = 2.0, backoff: float = 0.5):
        self.rec, self.group = rec, group
        self.scale, self.growth_interval, self.growth, self.backoff = init_scale, growth_interval, growth, backoff
        self.clean_steps, self.skipped = 0, 0
        self.history: list[dict] = []  # per step: the scale it ran with and whether it was applied

    def scaled(self, loss_fn):
        def loss(output, target):
            return loss_fn(output, target) * self.scale

        return loss

    def unscale_(self, params) -> bool:
        """Divide every gradient by the scale; True when all are finite on every rank."""
        inf = 0.0
        grads = [p.grad for p in params if p.grad is not None]
        for g in grads:
            g.mul_(1.0 / self.scale)
            inf = max(inf, float(not torch.isfinite(g).all()))
        if self.group is not None:
            flag = torch.tensor([inf], device=grads[0].device if grads else "cpu")
            self.rec.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self.group)
            inf = float(flag.item())
        return inf == 0.0

    def update(self, finite: bool) -> None:
        self.history.append({"scale": self.scale, "applied": finite})
        if not finite:
            self.scale *= self.backoff
            self.clean_steps = 0
            self.skipped += 1
            return
        self.clean_steps += 1
        if self.clean_steps % self.growth_interval == 0:
            self.scale *= self.growth


def accelerate_precision(dtype: str) -> str:
    """What `Accelerator(mixed_precision=...)` must be told for the layout's dtype."""
    return ACCELERATE[dtype]


def model_pieces(model: nn.Module) -> list[nn.Module]:
    """The pieces that run under autocast: GPT embed, blocks, head; an MLP's layers."""
    return [m for m in (model.embed, *model.repeated(), model.head) if m is not None]  # `Layered`


def _autocast_forward(forward, device_type: str, dtype: torch.dtype):
    @functools.wraps(forward)
    def run(*args, **kwargs):
        with torch.autocast(device_type, dtype=dtype):
            out = forward(*args, **kwargs)
        return out.float() if torch.is_floating_point(out) else out  # hand fp32 on

    return run


def apply_mixed_precision(model: nn.Module, dtype: str, device_type: str = "cpu") -> nn.Module:
    """Run every piece of `model` under autocast(`dtype`) in place (module docstring); the
    parameters are left fp32. Parameter names are unchanged (the forward is wrapped on the
    instance, as Accelerate's `prepare` does)."""
    check_precision(dtype)
    if dtype == "fp32":
        return model
    for piece in model_pieces(model):
        piece.forward = _autocast_forward(piece.forward, device_type, DTYPES[dtype])
    return model


def loss_curve_parity(rtol: float = 0.05):
    """The parity check of a reduced-precision run against the fp32 reference: every step's
    loss within `rtol` (relative) of the reference's — not bitwise, the numbers differ on
    purpose. `compare(record, weights, ref, tolerance) -> parity dict` for the runner."""

    def compare(record: dict, weights, ref: dict, tolerance=None) -> dict:
        tol = (tolerance or {}).get("rtol", rtol)
        got, want = record["losses"], ref["record"]["losses"]
        gaps = [abs(a - b) / abs(b) for a, b in zip(got, want)]
        return {"reference": ref["record"]["strategy"], "method": "loss curve: every step within rtol",
                "dtype": record["layout"]["dtype"], "tolerance": {"rtol": tol},
                "max_rel_gap": max(gaps), "final_rel_gap": gaps[-1],
                "max_abs_diff": max(abs(a - b) for a, b in zip(got, want)),
                "ok": len(got) == len(want) and max(gaps) <= tol}

    return compare
