"""Exercises in notebooks: the reader writes an answer, the cell checks it.

`check("q1", answer, expected, rel=0.05, hint="...")` compares and shows the verdict. An
unanswered exercise (`answer = None`) shows the hint and passes, so a notebook always runs top
to bottom (CI runs them untouched); `reveal=True` shows the expected value.
"""
from __future__ import annotations

import math


def _close(answer, expected, rel: float, abs_tol: float) -> bool:
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)):
        return math.isclose(float(answer), float(expected), rel_tol=rel, abs_tol=abs_tol)
    if isinstance(expected, (list, tuple)) and isinstance(answer, (list, tuple)):
        return len(answer) == len(expected) and all(
            _close(a, e, rel, abs_tol) for a, e in zip(answer, expected))
    return answer == expected


def check(name: str, answer, expected, *, rel: float = 0.05, abs_tol: float = 0.0,
          hint: str = "", reveal: bool = False) -> bool | None:
    """Print whether `answer` matches `expected` (numbers within `rel`); None if unanswered."""
    if answer is None:
        print(f"[{name}] not answered yet — set the answer and run the cell again."
              + (f"\n  hint: {hint}" if hint else "")
              + (f"\n  expected: {expected!r}" if reveal else ""))
        return None
    ok = _close(answer, expected, rel, abs_tol)
    if ok:
        print(f"[{name}] correct: {answer!r}")
    else:
        print(f"[{name}] not quite: you said {answer!r}." + (f"\n  hint: {hint}" if hint else "")
              + (f"\n  expected: {expected!r}" if reveal else ""))
    return ok
