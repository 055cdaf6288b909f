"""Notebooks leave no files behind: each notebook nbmake runs is checked for new or changed
files under `~/.cache/mgpukit` (user profiles, calibrations — what every later notebook's
dropdowns would list) and under the repository, outside temporary directories.

A notebook that needs a file writes it under `tempfile.mkdtemp()` / `TemporaryDirectory()`.

Hidden answers: the notebook nbmake has just executed (outputs and all, kept in memory) is read
by `mgpukit.exercises.leaks.find_leaks` — no exercise's answer may be on screen before its
check cell, no debugging quiz's table may single out its broken variant — and no cell may show a
raw library warning on stderr. The notebook runs once; the reading costs milliseconds.

Across the course (issue 35): each executed notebook is kept for the session, so a later one's
exercises are checked against what the earlier ones showed (`mgpukit.exercises.readouts`: run
the notebooks in one session, as `make test` does, to check that); a notebook whose legibility
checks are on (not in `mgpukit.exercises.legibility.PENDING`) prints a few lines or a table per
cell, and its claims — what its cells used to `assert` — are checked on its executed outputs
(`mgpukit.exercises.claims`).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from nbmake.nb_run import NotebookRun

from mgpukit.exercises.claims import claim_problems
from mgpukit.exercises.leaks import find_leaks
from mgpukit.exercises.legibility import PENDING, output_problems
from mgpukit.exercises.readouts import course_leaks, notebook_seen

REPO = Path(__file__).resolve().parents[1]
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".git", ".venv", "venv",
              "node_modules", "build", "dist"}


def watched() -> list[Path]:
    """Where a notebook must not write: the user's mgpukit cache and the repository."""
    return [Path(os.path.expanduser("~")) / ".cache" / "mgpukit", REPO]


def snapshot(roots=None) -> dict[str, float]:
    """path -> mtime of every file under the watched roots (skipping caches and venvs)."""
    files: dict[str, float] = {}
    for root in roots or watched():
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
            for f in filenames:
                p = os.path.join(dirpath, f)
                try:
                    files[p] = os.stat(p).st_mtime
                except OSError:
                    pass
    return files


def changes(before: dict[str, float], after: dict[str, float]) -> list[str]:
    return sorted([f"new: {p}" for p in after.keys() - before.keys()]
                  + [f"changed: {p}" for p in after.keys() & before.keys() if after[p] != before[p]])


def raw_warnings(nb) -> list[str]:
    """'cell N: <first line>' for every warning a code cell printed to stderr (issue 27: a reader
    sees a raw library warning as a pink block; catch it and say it in a sentence instead)."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            text = "".join(out.get("text", "")) if out.get("name") == "stderr" else ""
            found += [f"cell {i}: {line.strip()[:160]}" for line in text.splitlines() if "Warning:" in line]
    return found


_READ: list[tuple[str, dict]] = []  # the notebooks executed so far this session, in order


def reader_report(name: str, nb, earlier=()) -> str | None:
    """What a reader of executed notebook `name` should not see, or None (`earlier`: the
    (stem, executed notebook) pairs read before it)."""
    parts = []
    stem = Path(name).stem
    if stem not in PENDING:
        seen = [s for e_stem, e_nb in earlier if e_stem < stem for s in notebook_seen(e_stem, e_nb)]
        course = course_leaks(nb, seen, across=True)
        if course:
            parts.append(f"{name} asks what an earlier notebook already showed (mgpukit.exercises.readouts):\n  "
                         + "\n  ".join(course))
        wordy = output_problems(stem, nb) + claim_problems(stem, nb)
        if wordy:
            parts.append(f"{name} breaks the lesson rules (mgpukit.exercises.legibility, claims):\n  "
                         + "\n  ".join(wordy))
    leaks = find_leaks(nb)
    if leaks:
        parts.append(f"{name} shows exercise answers before they are asked (mgpukit.exercises.leaks):\n  "
                     + "\n  ".join(leaks))
    warned = raw_warnings(nb)
    if warned:
        parts.append(f"{name} shows raw warnings (catch the warning and say it in a sentence, or change "
                     "the call):\n  " + "\n  ".join(warned))
    return "\n".join(parts) or None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not str(item.path).endswith(".ipynb"):
        return (yield)
    before = snapshot()
    executed = []
    run = NotebookRun.execute

    def keep(self):  # nbmake's run, with the executed notebook kept for the leak check
        executed.append(run(self))
        return executed[-1]

    NotebookRun.execute = keep
    try:
        result = yield  # a failing notebook raises here and is reported as it is
    finally:
        NotebookRun.execute = run
    left = changes(before, snapshot())
    if left:
        raise AssertionError(f"{item.path.name} left files behind (a notebook writes only under a "
                             "temporary directory):\n  " + "\n  ".join(left[:20]))
    wrong = reader_report(item.path.name, executed[-1].nb, list(_READ)) if executed else None
    if executed:
        _READ.append((item.path.stem, executed[-1].nb))
    if wrong:
        raise AssertionError(wrong)
    return result
