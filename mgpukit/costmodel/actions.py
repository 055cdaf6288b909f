"""The vocabulary of pipeline schedules: their names, the kinds of work, one unit of work.

The bottom of the pipeline modules: ``schedules`` builds tables of :class:`Action`,
``simulate`` times them, ``pipeline`` gives their closed forms, ``layout`` checks a schedule's
name — all import from here and this imports nothing, so none of them imports another in a
circle. What ``F``, ``B``, ``I`` and ``W`` mean: ``mgpukit.costmodel.schedules``.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")
KINDS = ("F", "B", "I", "W")


@dataclass(frozen=True)
class Action:
    """One unit of pipeline work: ``kind`` of ``microbatch`` on global virtual ``stage``."""

    kind: str  # "F" | "B" | "I" | "W"
    microbatch: int
    stage: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Action kind must be one of {KINDS}, got {self.kind!r}.")

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}"


Table = list[list[Action]]  # table[rank]: that rank's actions, in the order it runs them


def num_stages(table: Table) -> int:
    """Number of (virtual) stages the table mentions: ``max stage + 1``."""
    return 1 + max((a.stage for ops in table for a in ops), default=-1)
