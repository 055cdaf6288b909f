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

bf16 keeps fp32's exponent range: no loss scaling. fp16 (5 exponent bits) underflows small
gradients and needs a loss scaler; the kit refuses it until one is wired into the trainer.
Collectives: none.
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
    if dtype == "fp16":
        raise ValueError("dtype='fp16' needs a loss scaler (fp16 underflows small gradients), which "
                         "the trainer does not have yet; use dtype='bf16' (same memory, fp32's range, "
                         "no scaling) or 'fp32'.")


def accelerate_precision(dtype: str) -> str:
    """What `Accelerator(mixed_precision=...)` must be told for the layout's dtype."""
    return ACCELERATE[dtype]


def model_pieces(model: nn.Module) -> list[nn.Module]:
    """The pieces that run under autocast: GPT embed, blocks, head; an MLP's layers."""
    if hasattr(model, "blocks"):
        return [model.embed, *model.blocks, model.head]
    return list(model.layers)


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
