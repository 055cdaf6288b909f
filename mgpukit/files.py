"""Writing results so that none is lost: check every output path before the work, then write
each file whole or not at all.

- `check_output(path, what=...)` before a run: a typo in `--json out/dir/rec.json` (a missing
  parent that cannot be made, a directory where a file should go, a read-only place, an
  existing file one must not overwrite) fails in one sentence before anything trains, instead
  of throwing the finished run away.
- `write_text` / `atomic_path`: the content goes to a temporary file next to the target, is
  flushed to disk, then renamed over it (`os.replace`, atomic on POSIX). A full disk or a
  crash mid-write leaves the previous file as it was, never a truncated one.
- `to_json`: strict JSON (`allow_nan=False`). Python's `json` writes NaN and ±inf as bare
  `NaN` / `Infinity` tokens that other JSON readers refuse; a non-finite float is written as
  the string "NaN", "Infinity" or "-Infinity" instead, and `from_json` turns those back.

No torch here: the cost model writes through it too.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def check_output(path: str | os.PathLike, *, what: str = "output file", overwrite: bool = True,
                 directory: bool = False, force_hint: str = "--force") -> Path:
    """Raise ValueError (one sentence: what is wrong and what to do) if `path` cannot be written.

    `directory=True`: `path` is a folder to create or fill. `overwrite=False`: an existing file
    is refused (say `force_hint` to allow it). Nothing is created here."""
    path = Path(path).expanduser()
    if str(path).strip() == "":
        raise ValueError(f"the {what} path is empty; give a file name.")
    if path.exists():
        if directory and not path.is_dir():
            raise ValueError(f"{what} {path} exists and is not a directory; choose another path.")
        if not directory and path.is_dir():
            raise ValueError(f"{what} {path} is a directory; give a file name inside it.")
        if not directory and not overwrite:
            raise ValueError(f"{what} {path} already exists; pass {force_hint} to overwrite it, "
                             f"or choose another path.")
        target_dir = path if directory else path.parent
        if not os.access(target_dir, os.W_OK):
            raise ValueError(f"cannot write {what} {path}: {target_dir} is not writable.")
        return path
    ancestor = path.parent
    while not ancestor.exists():  # the folders that would be created
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"cannot write {what} {path}: {ancestor} is a file, not a directory.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {what} {path}: {ancestor} is not writable.")
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; when the block ends without error it replaces
    `path` in one rename (after an fsync), else it is deleted and `path` is left untouched."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if path.exists():  # keep the permissions a user gave the file it replaces
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def _finite(value):
    """`value` with every non-finite float replaced by its NON_FINITE name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _default(value):
    if hasattr(value, "tolist"):  # tensors, numpy arrays
        return _finite(value.tolist())
    if hasattr(value, "item"):
        return _finite(value.item())
    if dataclass_fields := getattr(value, "__dataclass_fields__", None):
        return _finite({k: getattr(value, k) for k in dataclass_fields})
    return str(value)


def to_json(value, **kwargs) -> str:
    """Strict JSON of `value`: non-finite floats become "NaN" / "Infinity" / "-Infinity"."""
    return json.dumps(_finite(value), allow_nan=False, default=_default, **kwargs)


def _restore(value):
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v) for v in value]
    return value


def from_json(text: str):
    """Read what `to_json` wrote, with the non-finite floats back as floats."""
    return _restore(json.loads(text))
