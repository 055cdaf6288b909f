"""Notebooks leave no files outside a temporary directory (issue 14: notebook 03 used to save a
hardware profile into ~/.cache/mgpukit, which then showed in every notebook's dropdowns).

`notebooks/conftest.py` compares ~/.cache/mgpukit and the repository before and after every
notebook nbmake runs; these tests check that guard on a tiny notebook (the test of the test)
and scan the shipped notebooks for calls that write outside a temporary directory."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WRITERS = ("save_profile(", "user_profile_dir(", "write_report(", "write_records(", ".write_text(",
           "json_path=", "trace_path=", "torch_profile_dir=", "mgpukit calibrate")


def _code(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_do_not_call_a_writer_outside_a_temp_dir(path):
    for src in _code(path):
        if "tempfile" in src or "TemporaryDirectory" in src:
            continue
        found = [w for w in WRITERS if w in src]
        assert not found, f"{path.name} calls {found} outside a temporary directory:\n{src}"


def _notebook(code: str) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {},
                       "outputs": [], "source": code}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def test_the_guard_fails_a_notebook_that_writes_into_the_mgpukit_cache(tmp_path):
    work = tmp_path / "repo" / "notebooks"
    work.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "conftest.py", work / "conftest.py")
    writes = ("from pathlib import Path\n"
              "p = Path.home() / '.cache' / 'mgpukit' / 'hardware' / 'mine.toml'\n"
              "p.parent.mkdir(parents=True, exist_ok=True); p.write_text('x = 1')")
    (work / "writes.ipynb").write_text(json.dumps(_notebook(writes)))
    (work / "clean.ipynb").write_text(json.dumps(_notebook(
        "import tempfile, pathlib\nd = tempfile.mkdtemp(); pathlib.Path(d, 'f').write_text('ok')")))
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbmake",
                          "writes.ipynb", "clean.ipynb"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=240)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 failed, 1 passed" in out and "left files behind" in out and "mine.toml" in out, out


# Issue 35: 01's compute-bound rule was written by a non-raw Python string, so `\text`, `\ast`,
# `\frac` and `\beta` became TAB, BEL, form feed and backspace, and the LaTeX rendered as garbage.
# A cell's source may hold newlines and nothing else below U+0020: a TAB is refused too (no
# notebook uses one; in markdown it is as likely a swallowed `\t` as indentation), as is DEL.
_CONTROL = {chr(c) for c in range(0x20) if c != 0x0A} | {"\x7f"}


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_sources_hold_no_control_characters(path):
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        src = "".join(cell["source"])
        found = sorted({repr(ch) for ch in src if ch in _CONTROL})
        assert not found, (f"{path.name} cell {i} ({cell['cell_type']}) holds control characters {found} "
                           f"(a non-raw string ate a backslash?): {src[:80]!r}")
