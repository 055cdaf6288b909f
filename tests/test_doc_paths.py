"""Every file a docstring, a notebook or a doc page names exists.

Method: read (never import) every docstring of `mgpukit/` with `ast`, every cell of
`notebooks/*.ipynb` and the Markdown pages (README, CONTRIBUTING, docs/), and find

- paths with a file extension (`training/hetero.py`, `data/hardware/h100-nvlink.toml`,
  `docs/ARCHITECTURE.md`): some file of the repository must end with that path;
- dotted module names (`mgpukit.measure.idle`, `mgpukit.lessons.hybrid.node_placements`): the
  longest prefix that is a module must exist, and the next name must appear in it;
- the bullet list of a package's docstring (`- \\`stages\\`  cut a GPT into stages`): each name
  before the description must be a module or sub-package of that package.

Names of files the kit *writes* (`--json r.json`) and of files in other projects (nccl-tests'
`doc/PERFORMANCE.md`) are not this repository's: they are listed in `NOT_OURS`, each with why.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "mgpukit"

# name -> why it is not a file of this repository
NOT_OURS = {
    "doc/PERFORMANCE.md": "NVIDIA/nccl-tests' page on bus bandwidth, cited",
    "data_parallel/bucket.py": "picotron's bucket module, cited",
    "this-machine.toml": "what `mgpukit calibrate` writes",
    "plan.json": "an output of `mgpukit plan --json`",
    "out/dir/rec.json": "an example output path",
    "out_dir/records.json": "what `mgpukit tour` writes",
    "records.json": "what `mgpukit tour` writes",
    "results.md": "what `mgpukit tour` writes",
    "report/results.md": "what `make demo` writes",
    "r.json": "an example `--json` output",
    "t.json": "an example `--trace` output",
    "my_train.py": "an example `mgpukit export --out` file",
    "scripts/train_NAME.py": "where `mgpukit export NAME` writes",
    "scripts/train_zero3.py": "an example of what `mgpukit export zero3` writes",
    "executed.ipynb": "an example argument of `python -m mgpukit.exercises.leaks`",
    "my.toml": "an example `mgpukit plan --model-file`",
    "step-K/manifest.json": "what a checkpoint save writes (training/checkpoint_files.py)",
    "research/probe_orphans.py": "issue 25's probe, cited before it is committed: drop this line once it is",
}
PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|toml|ipynb|json|ya?ml|sbatch))\b")
DOTTED = re.compile(r"(?<![\w.])(mgpukit(?:\.\w+)+)")
BULLET = re.compile(r"^\s*-\s+((?:`\w+`(?:,\s*)?)+)\s")


def _repo_files() -> list[str]:
    skip = {".git", ".venv", "__pycache__", ".ipynb_checkpoints", "node_modules"}
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def _docstrings(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc


def texts() -> list[tuple[str, str]]:
    """(where, text) for every docstring, notebook cell and doc page."""
    out = [(p.relative_to(ROOT).as_posix(), doc) for p in sorted(PACKAGE.rglob("*.py")) for doc in _docstrings(p)]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out += [(nb.relative_to(ROOT).as_posix(), "".join(c["source"])) for c in json.loads(nb.read_text())["cells"]]
    for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if page.exists():
            out.append((page.relative_to(ROOT).as_posix(), page.read_text()))
    return out


def missing_paths(items, files) -> list[tuple[str, str]]:
    bad = []
    for where, text in items:
        for name in PATH.findall(text):
            if name in NOT_OURS:
                continue
            if not any(f == name or f.endswith("/" + name) for f in files):
                bad.append((where, name))
    return bad


def _module_source(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def missing_modules(items) -> list[tuple[str, str]]:
    bad = []
    for where, text in items:
        for dotted in DOTTED.findall(text):
            parts = dotted.split(".")
            for i in range(len(parts), 0, -1):
                source = _module_source(parts[:i])
                if source is not None:
                    rest = parts[i:]
                    if rest and not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text()):
                        bad.append((where, dotted))
                    break
    return bad


def missing_submodules(init: Path) -> list[str]:
    """Names in the bullet list of a package docstring that are no module of that package."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    bad = []
    for line in doc.splitlines():
        m = BULLET.match(line)
        if m:
            for name in re.findall(r"`(\w+)`", m.group(1)):
                if not ((init.parent / f"{name}.py").is_file() or (init.parent / name / "__init__.py").is_file()):
                    bad.append(name)
    return bad


def test_the_checks_see_stale_names(tmp_path):
    """The test of the test: a gone module, a gone path and a gone bullet are each caught."""
    files = ["mgpukit/training/hetero.py", "docs/ARCHITECTURE.md"]
    text = [("x", "see `training/hetero.py`, docs/ARCHITECTURE.md and strategies/pipeline/bubble.py")]
    assert missing_paths(text, files) == [("x", "strategies/pipeline/bubble.py")]
    assert missing_modules([("x", "mgpukit.measure.idle.measure_bubble and mgpukit.measure.idle.nothing_here")]) \
        == [("x", "mgpukit.measure.idle.nothing_here")]
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "stages.py").write_text("")
    (pkg / "__init__.py").write_text('"""A package.\n\n- `stages`   cut\n- `train`, `stages`  gone\n"""\n')
    assert missing_submodules(pkg / "__init__.py") == ["train"]


def test_every_named_path_exists():
    bad = missing_paths(texts(), _repo_files())
    assert not bad, "\n".join(f"{where} names {name}, which is not in the repository" for where, name in bad)


def test_every_named_module_exists():
    bad = missing_modules(texts())
    assert not bad, "\n".join(f"{where} names {name}, which does not exist" for where, name in bad)


@pytest.mark.parametrize("init", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: p.parent.name)
def test_package_docstrings_list_their_modules(init):
    assert not missing_submodules(init), f"{init.relative_to(ROOT)} lists {missing_submodules(init)}"
