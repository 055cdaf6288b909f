"""A NaN or infinite loss or gradient stops training at its step, before the optimizer step.

Shared by the one trainer and the strategies with a loop of their own (the parameter server),
so that every strategy stops the same way: `NonFiniteError`, naming the step and the rank.
"""
from __future__ import annotations

import math


class NonFiniteError(FloatingPointError):
    """The loss or a gradient was NaN or infinite; the optimizer step was not taken."""

    exit_code = 1  # the CLI prints this message alone (runtime/failures.py), and exits 1


def check_finite(loss, sq_norm: float, *, step: int, rank: int) -> None:
    """Raise `NonFiniteError` when the loss or the gradient's squared norm is not finite.

    `sq_norm` is Σ‖g‖² in float64 over this rank's gradients (every float32 square fits), so
    one `isfinite` on it covers every element: no extra pass over the gradients."""
    loss_value = float(loss) if loss is not None else 0.0
    bad = [what for what, v in (("loss", loss_value), ("gradient", sq_norm)) if not math.isfinite(v)]
    if bad:
        shown = loss_value if "loss" in bad else sq_norm ** 0.5
        raise NonFiniteError(
            f"non-finite {' and '.join(bad)} ({shown}) at step {step} on rank {rank}: stopped before "
            f"the optimizer step, so the weights are those after step {step - 1}. Usually the "
            f"learning rate is too high (lower --lr) or the inputs overflow.")
