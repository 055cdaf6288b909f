"""Notebooks leave no files behind: each notebook nbmake runs is checked for new or changed
files under `~/.cache/mgpukit` (user profiles, calibrations — what every later notebook's
dropdowns would list) and under the repository, outside temporary directories.

A notebook that needs a file writes it under `tempfile.mkdtemp()` / `TemporaryDirectory()`.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not str(item.path).endswith(".ipynb"):
        return (yield)
    before = snapshot()
    result = yield  # a failing notebook raises here and is reported as it is
    left = changes(before, snapshot())
    if left:
        raise AssertionError(f"{item.path.name} left files behind (a notebook writes only under a "
                             "temporary directory):\n  " + "\n  ".join(left[:20]))
    return result
