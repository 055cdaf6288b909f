"""Unequal batches per data-parallel rank, the same gradient: the `batch_split` knob.

`batch_split="24,8"` gives rank i `b_i` rows of the global batch, in rank order (they add up to
`global_batch`, each a multiple of `micro_batches`); rank i takes the next `b_i` rows, so the
slices concatenated are still the single-process batch — parity comes free. Why a run wants it
(a mixed cluster, a throttled rank) and how to pick the split: `hetero.py`.

The trap is the average: rank i's loss is the mean over its `b_i` rows, so the plain average of
the ranks' gradients weights a row of a small shard more than a row of a large one. The global
batch's gradient is the *weighted* average `g = Σ_i (b_i / B) · g_i` (B = Σ_i b_i). Each rank
multiplies its loss (hence its gradient) by `w_i = n · b_i / B` before backward; the unchanged
data-parallel average `(1/n) Σ_i w_i g_i` is then exactly `g`, whichever sync runs it.
"""
from __future__ import annotations


def parse_split(spec) -> tuple[int, ...] | None:
    """"24,8" (or a list) -> (24, 8); None/"" -> None."""
    if spec is None or spec == "":
        return None
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    try:
        rows = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(f"batch_split={spec!r}: give rows per data-parallel rank, e.g. '24,8'.") from None
    if any(r < 1 for r in rows):
        raise ValueError(f"batch_split={spec!r}: every rank needs at least one row.")
    return rows


def loss_weight(cfg, dp_rank: int, dp_size: int) -> float:
    """`w_i = n · b_i / B` (1.0 without a split): the plain average then weighs rows equally."""
    split = parse_split(cfg.options.get("batch_split"))
    if split is None:
        return 1.0
    return dp_size * split[dp_rank] / cfg.global_batch


def weighted(loss_fn, weight: float):
    """`loss_fn` times `weight` (returned unchanged when the weight is 1)."""
    if weight == 1.0:
        return loss_fn

    def loss(*args, **kwargs):
        return loss_fn(*args, **kwargs) * weight

    return loss


def check_batch_split(cfg, dims) -> None:
    """Refuse a split that cannot work (ValueError saying what to change)."""
    split = parse_split(cfg.options.get("batch_split"))
    if split is not None:
        if dims.tp > 1 or dims.pp > 1:
            raise ValueError("batch_split weights each data-parallel rank's loss; it runs with "
                             "data parallelism alone (tp = pp = 1).")
        if len(split) != dims.dp:
            raise ValueError(f"batch_split={cfg.options['batch_split']!r} gives {len(split)} ranks' "
                             f"rows; the run has dp={dims.dp}.")
        if sum(split) != cfg.global_batch:
            raise ValueError(f"batch_split={cfg.options['batch_split']!r} adds up to {sum(split)} rows; "
                             f"global_batch is {cfg.global_batch}.")
        m = cfg.layout.num_micro_batches
        if any(r % m for r in split):
            raise ValueError(f"batch_split={cfg.options['batch_split']!r}: each rank's rows must split "
                             f"into micro_batches={m}.")
