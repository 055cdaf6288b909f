"""The exercise record and its lookup: every notebook exercise's expected value, hint and explanation.

An expected value is a function, evaluated when checked, so it follows the code it is about
(a formula in `costmodel`, a model's parameter count): nothing is typed in twice. Names are
"NN.topic" with NN the notebook. The exercises themselves are written down by notebook, each
computed by the library: `answers_00_04` (data parallelism, communication, compression,
pipelines) and `answers_05_10` (tensor parallelism, sharding, memory, hybrid layouts, planning,
beyond); importing `mgpukit.exercises` registers them all.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Exercise:
    name: str
    expected: Callable[[], Any]
    hint: str = ""
    why: str = ""  # shown once the answer is right (or on `reveal`)
    rel: float = 0.02
    abs_tol: float = 0.0
    mistakes: tuple = field(default=())  # ((wrong value or fn, "what that answer forgot"), ...)
    choice: bool = False  # the answer is the number of a listed choice (a suspect), not a quantity


EXERCISES: dict[str, Exercise] = {}


def add(name: str, expected: Callable[[], Any], **kw) -> None:
    """Register exercise `name` (the `answers_*` modules call it once per exercise)."""
    EXERCISES[name] = Exercise(name=name, expected=expected, **kw)


def get_exercise(name: str) -> Exercise:
    if name not in EXERCISES:
        raise KeyError(f"no exercise {name!r}; known: {', '.join(sorted(EXERCISES))}")
    return EXERCISES[name]


def expected_value(name: str):
    """The expected answer of exercise `name` (tests use it; notebooks call `reveal`)."""
    return get_exercise(name).expected()

