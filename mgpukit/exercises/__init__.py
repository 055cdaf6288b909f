"""Exercises in notebooks: the reader writes an answer, the library checks it.

The expected values live here (`answers_00_04.py`, `answers_05_10.py`, looked up through
`registry.py`), not in the notebook, so an exercise cell holds only the reader's answer and a
call — nothing to read off:

    answer = None
    check("00.ring-bytes", answer)

`check` says *right* or *wrong and why* (too high or low, by what factor, a known slip such as
forgetting the 1/n) and gives the hint; an unanswered exercise (`answer = None`) shows no hint (`hint(name)` does)
and passes, so a notebook runs top to bottom untouched (CI). `reveal(name)` shows the expected
value and its explanation — only when the reader asks.

The old form `check(name, answer, expected, rel=..., hint=...)` still works for a notebook that
keeps its own expected value.

`mystery_runs(name)` (debugging exercises): three variants, one of them broken on purpose, run
under anonymous labels; `suspects(name)` lists four mechanisms a reader could blame, and the reader
names the one that explains the broken variant's parity report (`suspects.py`).
"""
from __future__ import annotations

import math

from mgpukit.exercises.debugging import mystery_runs, parity_report  # the debugging exercises' runs
from mgpukit.exercises.registry import Exercise, EXERCISES, expected_value, get_exercise
from mgpukit.exercises.suspects import suspects
# the answers register themselves with the registry when imported: every exercise, notebook by notebook
from mgpukit.exercises import answers_00_04, answers_05_10, answers_11  # noqa: F401
# and the notebooks' claims register with `claims` (checked on the executed notebooks by nbmake)
from mgpukit.exercises import claims_00_04  # noqa: F401
from mgpukit.exercises import claims_02_03  # noqa: F401
from mgpukit.exercises import claims_06_10  # noqa: F401

_MISSING = object()

__all__ = ["check", "hint", "reveal", "expected_value", "get_exercise", "EXERCISES", "Exercise", "mystery_runs",
           "parity_report", "suspects"]


def _close(answer, expected, rel: float, abs_tol: float) -> bool:
    if isinstance(expected, bool) or isinstance(answer, bool):
        return answer == expected
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)):
        return math.isclose(float(answer), float(expected), rel_tol=rel, abs_tol=abs_tol)
    if isinstance(expected, (list, tuple)) and isinstance(answer, (list, tuple)):
        return len(answer) == len(expected) and all(
            _close(a, e, rel, abs_tol) for a, e in zip(answer, expected))
    if isinstance(expected, str) and isinstance(answer, str):
        return answer.strip().lower() == expected.strip().lower()
    return answer == expected


def _how_far(answer, expected) -> str:
    """'too high by 2.00×' for numbers — a factor of 2 or n usually names the slip."""
    if (isinstance(answer, (int, float)) and isinstance(expected, (int, float))
            and not isinstance(answer, bool) and expected and answer):
        ratio = float(answer) / float(expected)
        if f"{max(ratio, 1 / ratio):.3g}" == "1":   # "by 1×" says nothing: give the difference
            gap = float(answer) - float(expected)
            return f" That is too {'high' if gap > 0 else 'low'}, by {abs(gap):.3g}."
        if ratio > 1:
            return f" That is too high, by {ratio:.3g}×."
        return f" That is too low, by {1 / ratio:.3g}×."
    return ""


def check(name: str, answer, expected=_MISSING, *, rel: float | None = None,
          abs_tol: float | None = None, hint: str | None = None, reveal: bool = False) -> bool | None:
    """Print whether `answer` is right (numbers within a relative tolerance) and why; None
    when unanswered. `expected` defaults to the library's value for exercise `name`."""
    ex = get_exercise(name) if expected is _MISSING else None
    if ex is not None:
        expected = ex.expected()
        rel = ex.rel if rel is None else rel
        abs_tol = ex.abs_tol if abs_tol is None else abs_tol
        hint = ex.hint if hint is None else hint
    rel = 0.05 if rel is None else rel
    abs_tol = 0.0 if abs_tol is None else abs_tol
    hint = hint or ""
    if answer is None:  # no hint yet: a hint printed under every unanswered cell is read before the question is tried
        print(f"[{name}] not answered yet — set the answer and run the cell again"
              + (f" (a wrong answer shows a hint; `hint({name!r})` shows it now, `reveal({name!r})` the answer)."
                 if ex is not None else ".")
              + (f"\n  expected: {expected!r}" if reveal else ""))
        return None
    ok = _close(answer, expected, rel, abs_tol)
    if ok:
        print(f"[{name}] correct: {answer!r}." + (f"\n  why: {ex.why}" if ex is not None and ex.why else ""))
        return True
    slip = ""
    if ex is not None:
        for wrong, explanation in ex.mistakes:
            if _close(answer, wrong() if callable(wrong) else wrong, rel, abs_tol):
                slip = f"\n  {explanation}"
                break
    far = "" if ex is not None and ex.choice else _how_far(answer, expected)  # suspect 4 is not "2× too high"
    print(f"[{name}] not quite: you said {answer!r}." + far + slip
          + (f"\n  hint: {hint}" if hint else "")
          + (f"\n  expected: {expected!r}" if reveal else ""))
    return False


def hint(name: str) -> None:
    """Show exercise `name`'s hint — the reader asked for it (an unanswered check does not)."""
    print(f"[{name}] hint: {get_exercise(name).hint}")


def reveal(name: str) -> None:
    """Show exercise `name`'s expected value and why — the reader asked for it."""
    ex = get_exercise(name)
    print(f"[{name}] expected: {ex.expected()!r}" + (f"\n  why: {ex.why}" if ex.why else ""))
