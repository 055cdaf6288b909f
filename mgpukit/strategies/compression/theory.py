"""Predicted bytes and communication time of one step of each compression method.

`exchange_plan(method, shapes, n, ...)` lists the collectives one step runs, each with the
buffer size the `Recorder` counts (all-reduce: the buffer; all-gather: the gathered output).
From the plan come the bytes each rank sends (ring "bus bytes", as the recorder counts them)
and, on a link, the alpha-beta time (`mgpukit.costmodel.comm`). The tests compare these
predictions with the bytes the recorder measured.

Per rank and step, for P fp32 gradients on n workers (ring algorithms):

=============  ===================================  =====================================
method         bytes sent                           factor vs fp32 all-reduce
=============  ===================================  =====================================
fp32 (ddp)     2(n-1)/n · 4P                        1
fp16 / bf16    2(n-1)/n · 2P                        2
int8 gather    (n-1) · (P + 4P/chunk)               8 / (n · (1 + 4/chunk)) — 4× at n=2, 1× at n=8
int8 reduce    2(n-1)/n · (P + 4P/chunk)            4 / (1 + 4/chunk), any n (fewer levels)
top-k          (n-1) · 8K,  K ≈ ratio · P           P / (n K) ≈ 1 / (n · ratio) — 50× at n=2, 1%
PowerSGD       2(n-1)/n · 4(Σ r(rows+cols) + U)     ≈ rows·cols / (r(rows+cols)) per matrix
=============  ===================================  =====================================

(U: elements of the tensors PowerSGD leaves uncompressed — biases, norms, small matrices.)
The all-gather methods (int8 gather, top-k) send every rank's payload to every rank: their
bytes grow with n while an all-reduce's stay ~2·B, which is why sparse exchange pays less on
large groups (Shi et al. 2019, "A Distributed Synchronous SGD Algorithm with Global Top-k
Sparsification for Low Bandwidth Networks").
"""
from __future__ import annotations

import math

from mgpukit.costmodel import comm as cost
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.training.building import build_model_shapes

METHODS = ("fp32", "fp16", "bf16", "int8", "topk", "powersgd")
# each method's knobs (`cfg.options` keys) and their defaults
DEFAULTS = {"topk": {"ratio": 0.01}, "int8": {"chunk": 1024, "int8_exchange": "all_gather"},
            "powersgd": {"rank": 2}}


def param_shapes(cfg) -> list[tuple[int, ...]]:
    """Shapes of the trainable parameters of `cfg`'s model, in model order."""
    return [tuple(p.shape) for p in build_model_shapes(cfg).parameters() if p.requires_grad]


def topk_count(numel: int, ratio: float) -> int:
    """k, the entries top-k sends per rank: `max(1, ceil(ratio · P))`."""
    return max(1, math.ceil(ratio * numel))


def powersgd_split(shapes, rank: int, min_compression_rate: float = 2.0) -> tuple[int, int, int]:
    """(elements of the P factors, of the Q factors, left uncompressed) — the rule of torch's
    `powerSGD_hook`: a tensor viewed as (rows, cols) is compressed into P (rows, r) and
    Q (cols, r) when `rows·cols > rate · r·(rows + cols)`; biases and norms stay dense."""
    p_elems, q_elems, dense = 0, 0, 0
    for s in shapes:
        rows, cols = s[0], math.prod(s[1:])
        r = min(rows, cols, rank)
        if (rows + cols) * r * min_compression_rate < rows * cols:
            p_elems, q_elems = p_elems + rows * r, q_elems + cols * r
        else:
            dense += rows * cols
    return p_elems, q_elems, dense


def exchange_plan(method: str, shapes, n: int, *, ratio: float = DEFAULTS["topk"]["ratio"],
                  chunk: int = DEFAULTS["int8"]["chunk"],
                  int8_exchange: str = DEFAULTS["int8"]["int8_exchange"],
                  rank: int = DEFAULTS["powersgd"]["rank"]) -> list[tuple[str, int]]:
    """[(collective, bytes as the recorder counts them)] for one step of `method` on n ranks."""
    numel = sum(math.prod(s) for s in shapes)
    if method == "fp32":
        return [("all_reduce", 4 * numel)]
    if method in ("fp16", "bf16"):
        return [("all_reduce", 2 * numel)]
    if method == "int8":
        chunks = math.ceil(numel / chunk)
        padded = chunks * chunk  # int8 values, one byte each
        if int8_exchange == "all_gather":
            return [("all_gather", n * (padded + 4 * chunks))]  # values + fp32 scales, packed
        return [("all_reduce", 4 * chunks), ("all_reduce", padded)]  # shared scales (MAX), values
    if method == "topk":
        k = topk_count(numel, ratio)
        return [("all_gather", n * 8 * k)]  # fp32 value + int32 index per kept entry
    if method == "powersgd":
        p_elems, q_elems, dense = powersgd_split(shapes, rank)
        # the hook's three all-reduces, in its order: uncompressed tensors, then P, then Q
        return [("all_reduce", 4 * dense), ("all_reduce", 4 * p_elems), ("all_reduce", 4 * q_elems)]
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}.")


def plan_bytes(plan, n: int) -> float:
    """Bytes one rank sends for `plan` (ring bus bytes)."""
    return sum(cost.bus_factor(name, n) * nbytes for name, nbytes in plan)


def plan_time(plan, n: int, link) -> float:
    """Alpha-beta seconds of `plan` on `link` (its collectives one after another)."""
    times = {"all_reduce": cost.allreduce_time, "all_gather": cost.allgather_time}
    return sum(times[name](nbytes, n, link) for name, nbytes in plan)


def predicted_bytes(method: str, cfg, n: int, **knobs) -> float:
    """Bytes one rank sends per step for `method` on `cfg`'s model and n ranks."""
    return plan_bytes(exchange_plan(method, param_shapes(cfg), n, **knobs), n)


def compression_theory(method: str):
    """The registry's `theory=` for `method`: data-parallel figures with compressed comm bytes."""

    def theory(cfg, dims) -> dict:
        out = dp_theory(cfg, dims)
        knobs = knobs_of(method, cfg.options)
        dense = predicted_bytes("fp32", cfg, dims.dp)
        out["comm_bytes"] = predicted_bytes(method, cfg, dims.dp, **knobs)
        out["comm_bytes_uncompressed"] = dense
        out["compression_factor"] = dense / out["comm_bytes"] if out["comm_bytes"] else math.inf
        out["knobs"] = knobs
        return out

    return theory


def knobs_of(method: str, options: dict) -> dict:
    """The method's knobs from `cfg.options`, defaults filled in."""
    defaults = DEFAULTS.get(method, {})
    return {k: options.get(k, v) for k, v in defaults.items()}
