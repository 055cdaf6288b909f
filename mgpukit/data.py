"""Datasets and deterministic per-rank batches.

Two workloads ship with the kit:

* **tinytext** — a ~200 KB English-like corpus (``data/tinytext.txt``, written by
  ``data/make_tinytext.py`` from a hand-written grammar, no download) read as characters.
  The alphabet is the fixed string :data:`VOCAB`, so ``vocab_size`` never depends on the file.
* **teacher regression** — synthetic ``(x, y)`` pairs from a fixed random two-layer network,
  the data for the MLP benchmarks.

The rule every strategy relies on: the *global* batch of a step depends only on
``(seed, step)``, and rank ``r`` of ``w`` takes rows ``[r*B/w, (r+1)*B/w)`` of it. So the
ranks' slices, concatenated in rank order, are exactly the single-process batch — which is why
a data-parallel run can be compared number for number with a single-process reference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import torch

# The alphabet of tinytext: newline, space, punctuation, digits, lower-case letters.
# The generator refuses any other character, so a token id means the same thing forever.
VOCAB = "\n !\"',-.:;?0123456789abcdefghijklmnopqrstuvwxyz"

# Embedding tables are padded to 64 rows: a multiple of 8 lets vocab-parallel layers split
# the table evenly over 1, 2, 4 or 8 ranks. Ids >= len(VOCAB) never occur in the data.
VOCAB_SIZE = 64

_MASK64 = (1 << 64) - 1


def tinytext_path() -> Path:
    """Where the shipped corpus lives: ``<repo>/data/tinytext.txt``."""
    return Path(__file__).resolve().parents[1] / "data" / "tinytext.txt"


def encode(text: str) -> torch.Tensor:
    """Characters -> token ids (int64). Raises ValueError on a character outside VOCAB."""
    unknown = sorted(set(text) - set(VOCAB))
    if unknown:
        raise ValueError(
            f"characters {unknown!r} are not in mgpukit.data.VOCAB; "
            "remove them from the text or add them to VOCAB (and regenerate the data)"
        )
    table = torch.full((128,), -1, dtype=torch.long)  # ASCII byte -> token id
    table[torch.tensor([ord(c) for c in VOCAB])] = torch.arange(len(VOCAB))
    raw = torch.frombuffer(bytearray(text.encode("ascii")), dtype=torch.uint8)
    return table[raw.long()]


def decode(ids: torch.Tensor | list[int]) -> str:
    """Token ids -> text (the inverse of :func:`encode`)."""
    return "".join(VOCAB[i] for i in torch.as_tensor(ids).flatten().tolist())


def load_tokens(path: str | Path | None = None) -> torch.Tensor:
    """Read a text file (default: the shipped tinytext corpus) as a 1-D LongTensor of ids."""
    path = Path(path) if path is not None else tinytext_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; create it with `python data/make_tinytext.py` "
            "from the repository root"
        )
    return encode(path.read_text(encoding="ascii"))


def step_seed(seed: int, step: int) -> int:
    """A 63-bit generator seed for ``(seed, step)``, the same on every machine and Python.

    splitmix64 mixing rather than ``hash()``, whose value is not promised across versions.
    """
    z = (seed * 0x9E3779B97F4A7C15 + step + 1) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


def _local_rows(global_batch: int, rank: int, world_size: int, split=None) -> slice:
    """Rows of the global batch that belong to ``rank``; refuses an uneven split unless
    ``split`` gives each rank's row count (heterogeneous data parallelism)."""
    if split is not None:
        if len(split) != world_size or sum(split) != global_batch:
            raise ValueError(f"split={split} must give {world_size} ranks rows adding up to {global_batch}")
        start = sum(split[:rank])
        return slice(start, start + split[rank])
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}")
    if global_batch % world_size:
        raise ValueError(
            f"global_batch={global_batch} is not divisible by world_size={world_size}; "
            f"use a global batch that is a multiple of {world_size}"
        )
    per_rank = global_batch // world_size
    return slice(rank * per_rank, (rank + 1) * per_rank)


def get_batch(
    tokens: torch.Tensor,
    *,
    step: int,
    global_batch: int,
    seq_len: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    split: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice of the global language-model batch for ``step``.

    The global batch is ``global_batch`` windows at random offsets drawn from a generator
    seeded by ``(seed, step)``; ``y`` is ``x`` shifted by one character. Returns ``x, y``,
    both ``(global_batch // world_size, seq_len)`` int64 on the CPU.
    """
    rows = _local_rows(global_batch, rank, world_size, split)
    if tokens.numel() <= seq_len:
        raise ValueError(f"seq_len={seq_len} needs more than {tokens.numel()} tokens; use a shorter seq_len")
    g = torch.Generator().manual_seed(step_seed(seed, step))
    # Every rank draws all offsets (cheap) so the stream is identical, then keeps its rows.
    offsets = torch.randint(0, tokens.numel() - seq_len, (global_batch,), generator=g)[rows]
    window = offsets[:, None] + torch.arange(seq_len + 1)  # (b, T+1)
    chunk = tokens[window]
    return chunk[:, :-1], chunk[:, 1:]


def split_microbatches(x: torch.Tensor, y: torch.Tensor, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Split a batch along dim 0 into ``n`` equal micro-batches (pipeline / accumulation)."""
    if n < 1 or x.shape[0] % n:
        raise ValueError(
            f"a batch of {x.shape[0]} rows does not split into {n} equal micro-batches; "
            "choose a micro-batch count that divides the per-rank batch"
        )
    return list(zip(x.chunk(n), y.chunk(n)))


def mlp_batch(
    *,
    step: int,
    global_batch: int,
    d_in: int,
    d_out: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    split: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice of a synthetic regression batch: ``y = tanh(x A) B`` for ``x ~ N(0, 1)``.

    The teacher ``(A, B)`` depends only on ``seed`` (and the sizes), so the same function is
    learned at every step and the loss can go down; the inputs depend on ``(seed, step)``.
    Same slicing rule as :func:`get_batch`. Returns float32 ``x (b, d_in)``, ``y (b, d_out)``.
    """
    rows = _local_rows(global_batch, rank, world_size, split)
    teacher_g = torch.Generator().manual_seed(step_seed(seed, -1))
    d_teacher = 64
    a = torch.randn(d_in, d_teacher, generator=teacher_g) / d_in**0.5
    b = torch.randn(d_teacher, d_out, generator=teacher_g) / d_teacher**0.5
    g = torch.Generator().manual_seed(step_seed(seed, step))
    x = torch.randn(global_batch, d_in, generator=g)
    # The teacher runs on the whole global batch, then rows are sliced: a matmul over fewer
    # rows may pick another kernel and differ in the last bit, breaking exact concatenation.
    y = torch.tanh(x @ a) @ b
    return x[rows], y[rows]


def iter_batches(
    tokens: torch.Tensor,
    *,
    num_steps: int,
    start_step: int = 0,
    loader_delay_s: float = 0.0,
    **batch_kw,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield :func:`get_batch` for steps ``start_step .. start_step + num_steps - 1``.

    ``loader_delay_s`` is the *slow loader* knob: it sleeps that long before each batch, to
    show what an input pipeline slower than the step does to throughput (and what prefetching
    hides). ``batch_kw`` are :func:`get_batch`'s keywords (global_batch, seq_len, rank, ...).
    """
    for step in range(start_step, start_step + num_steps):
        if loader_delay_s > 0:
            time.sleep(loader_delay_s)
        yield get_batch(tokens, step=step, **batch_kw)
