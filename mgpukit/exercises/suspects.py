"""Suspects: a debugging quiz asks for the *mechanism* of the bug, not the letter of its row.

A quiz that asks "which variant — A, B or C — is broken?" can be answered without understanding
anything: the broken row is often the one with the largest Δ somewhere (the weights of a run with
a tensor never synced drift farther than any rounding moves them), and a reader who picks it gets
the letter right for the wrong reason. So each quiz of notebooks 00–04 lists four *suspects* —
mechanisms a reader could blame, each written as what the code does — and asks which one explains
the broken variant's numbers. No suspect names a row. Each suspect leaves a signature in the
parity table the reader can work out from the lesson: the bytes a rank would send per step (its
`sends`, computed here from the model and the collective, as the table counts them) and the shape
of its differences (which columns move, by a rounding or by a factor). At least two suspects'
bytes appear in the printed table, so matching bytes alone does not answer; the reader rules
suspects out with the numbers (`refuted` is what a wrong answer is told).

`mgpukit.exercises.leaks` checks these rules on the executed notebook; `tests/test_exercises.py`
checks that the broken run's bytes are its suspect's, to the byte.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mgpukit.config import RunConfig
from mgpukit.costmodel import get_shape
from mgpukit.costmodel.comm import bus_factor
from mgpukit.strategies.compression import theory
from mgpukit.training.building import build_model

N = 2  # every quiz runs on 2 workers


@dataclass(frozen=True)
class Suspect:
    text: str                       # what the code does, as a reader would describe it
    sends: Callable[[], float]      # bytes one rank sends per step under this mechanism
    refuted: str = ""               # why the table rules it out (a wrong answer is told this)


def _numel(keep=lambda name: True) -> int:
    return sum(p.numel() for name, p in build_model(RunConfig()).named_parameters() if keep(name))


def _all_reduce(numel: int, bytes_per_value: int = 4) -> float:
    """Bytes a rank sends all-reducing `numel` values (ring: 2(n−1)/n of the buffer)."""
    return bus_factor("all_reduce", N) * bytes_per_value * numel


def _full() -> float:
    return _all_reduce(_numel())


def _without_layernorms() -> float:
    return _all_reduce(_numel(lambda name: ".ln" not in f".{name}"))


def _without_first_mlp() -> float:
    return _all_reduce(_numel(lambda name: name != "blocks.0.mlp.fc1.weight"))


def _without_token_embedding() -> float:
    return _all_reduce(_numel(lambda name: name != "embed.tok.weight"))


def _half_buffer() -> float:
    return _all_reduce(_numel()) / 2


def _broadcast() -> float:
    return bus_factor("broadcast", N) * 4 * _numel()


def _method(method: str, **knobs) -> Callable[[], float]:
    return lambda: theory.predicted_bytes(method, RunConfig(), N, **knobs)


def _int8_codes_only() -> float:
    """int8's all-reduce exchange without its first all-reduce (the scales'): the codes alone."""
    scales, codes = theory.exchange_plan("int8", theory.param_shapes(RunConfig()), N, int8_exchange="all_reduce")
    return theory.plan_bytes([codes], N)


def _pipeline_activations(fraction: float = 1.0) -> Callable[[], float]:
    """Stage 0's forward sends: every micro-batch's activations (batch × seq × d fp32 in all)."""
    shape, cfg = get_shape("gpt-tiny"), RunConfig()
    return lambda: fraction * cfg.global_batch * shape.seq_len * shape.d_model * 4


_SHAPE = get_shape("gpt-tiny")
_TABLE_KIB = _SHAPE.vocab * _SHAPE.d_model * 4 / 1024                          # the token embedding, fp32
_LAYERNORM_BYTES = (2 * _SHAPE.n_layer + 1) * 2 * _SHAPE.d_model * 4          # weight + bias of 2 per block + the final one

_SUM_NOT_MEAN = Suspect(
    "the gradients are all-reduced (summed) but never divided by n: every rank steps on the sum",
    _full, "that sends every gradient, 2(n−1)/n · 4Ψ bytes — and the one row that sends them is exact.")
_LAYERNORMS = Suspect(
    "the sync loops over the Linear and Embedding modules only: the LayerNorm weights and biases "
    "are never all-reduced", _without_layernorms)
_TOKEN_EMBEDDING = Suspect(
    "one parameter tensor, the token embedding table, is skipped by the sync loop",
    _without_token_embedding)

SUSPECTS: dict[str, tuple[Suspect, ...]] = {
    "00": (
        _SUM_NOT_MEAN,
        Suspect("each rank all-reduces only the first half of its flattened gradient buffer; the "
                "second half is never synced", _half_buffer,
                "that sends half the bytes, like the 16-bit exchange — but half the model never synced "
                "would drift far more than the broken row does, and the half-bytes row's differences "
                "are a rounding's: small in every column."),
        _LAYERNORMS,
        Suspect(_TOKEN_EMBEDDING.text, _without_token_embedding,
                "the token embedding is one of the model's largest tensors (its shape is in the "
                "model's parameters); the gap between the broken row's bytes and the exact row's is "
                "smaller than what skipping it would leave out."),
    ),
    "01": (
        Suspect("one parameter tensor is skipped by the sync loop, so every rank updates it from its "
                "own half-batch", _without_first_mlp),
        Suspect(_LAYERNORMS.text, _without_layernorms,
                f"leaving the {2 * (2 * _SHAPE.n_layer + 1)} LayerNorm vectors out would send {_LAYERNORM_BYTES:,} B less than the exact row; no "
                "row sends that."),
        Suspect(_SUM_NOT_MEAN.text, _full, _SUM_NOT_MEAN.refuted),
        Suspect("top-k keeps only the 1 % largest gradient entries and drops the rest for good (no "
                "error feedback)", _method("topk"),
                "its bytes are the compressor's, and a compressor misses parity by design; the bug "
                "is elsewhere — which row sends a little less than every gradient?"),
    ),
    "02": (
        Suspect(_SUM_NOT_MEAN.text, _full, _SUM_NOT_MEAN.refuted),
        Suspect(_TOKEN_EMBEDDING.text, _without_token_embedding,
                f"that would send {_TABLE_KIB:.0f} KiB less than the exact row; no row sends that."),
        Suspect("the gradients are rounded to fp16 for the all-reduce and cast back after it",
                _method("fp16"),
                "a 16-bit exchange sends half the bytes — but it moves every column by about a "
                "rounding (notebook 00's 16-bit row), not by a visible part of a gradient norm."),
        Suspect("rank 0's gradient is broadcast to every rank in place of the ranks' average",
                _broadcast),
    ),
    "03": (
        Suspect("top-k keeps only the 1 % largest gradient entries and drops the rest for good (no "
                "error feedback)", _method("topk"),
                "those bytes are top-k's, sent in full, and top-k misses parity by design; within 3 "
                "steps the error feedback changes no byte. Which row does not send what its method "
                "has to send?"),
        Suspect("int8: the ranks all-reduce their codes without first agreeing on the scales (no MAX "
                "all-reduce of them)", _int8_codes_only),
        Suspect("int8: the levels are not divided by n, so the sum of the ranks' codes can overflow "
                "an int8", _method("int8"),
                "that is int8's full exchange, scales included (section 3's bytes); no row sends it."),
        Suspect("PowerSGD without its error feedback: the part of each gradient the rank-r factors "
                "miss is dropped", _method("powersgd"),
                "PowerSGD's P and Q all-reduces have their own byte count (section 3); no row sends it."),
    ),
    "04": (
        Suspect("the logged loss is the sum of the micro-batch losses, while the gradient is the "
                "mean's (a logging slip)", _pipeline_activations(),
                "then only the losses would move; the row with the large losses Δ moved its gradient "
                "norms just as far."),
        Suspect("each micro-batch's loss is backpropagated without its 1/m, while the loss it logs "
                "is the mean", _pipeline_activations()),
        Suspect("the accumulated gradient is divided by m once more (1/m², m× too small)",
                _pipeline_activations(),
                "a gradient m× too small moves its norm by (1 − 1/m)× the norm; the broken row's "
                "gradient-norm Δ equals the summed-loss row's, whose gradient is m× the mean's."),
        Suspect("the schedule runs only half of the m micro-batches each step (its loop stops at m/2)",
                _pipeline_activations(0.5),
                "stage 0 would send half the activations; every row sends the same bytes."),
    ),
}

# the suspect (1-based, as printed) that explains each quiz's broken variant
ANSWERS = {"00": 3, "01": 1, "02": 4, "03": 2, "04": 2}


def suspects(name: str) -> None:
    """Print quiz `name`'s suspects, numbered as the answer expects them."""
    nn = name.split(".")[0]
    print("Suspects — which mechanism explains the broken variant's numbers?")
    for i, s in enumerate(SUSPECTS[nn], 1):
        print(f"  {i}. {s.text}")
    print("(bytes as the recorder counts them: each collective's tensor × its per-rank bus factor — 2(n−1)/n "
          "for an all-reduce; (n−1)/n for a broadcast, the average over the ranks: its source sends it all)")


def refutations(nn: str) -> tuple:
    """The exercise's `mistakes`: each wrong suspect and why the table rules it out."""
    return tuple((i, s.refuted) for i, s in enumerate(SUSPECTS[nn], 1) if i != ANSWERS[nn])


__all__ = ["Suspect", "SUSPECTS", "ANSWERS", "suspects", "refutations"]
