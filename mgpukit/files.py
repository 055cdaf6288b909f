"""Writing results so that none is lost: check every output path before the work, then write
each file whole or not at all.

- `check_output(path, what=...)` before a run: a typo in `--json out/dir/rec.json` (a missing
  parent that cannot be made, a directory where a file should go, a read-only place, an
  existing file one must not overwrite) fails in one sentence before anything trains, instead
  of throwing the finished run away. Whether a folder takes files is *tried* — a temporary
  file is created there and removed — not asked of `os.access`, which answers yes for root
  in `/proc` and on a read-only mount.
- `write_text` / `write_bytes` / `atomic_path`: the content goes to a temporary file next to
  the target, is flushed to disk (`fsync`), then renamed over it (`os.replace`, atomic on
  POSIX). A full disk (ENOSPC), a file-size limit (`ulimit -f`: EFBIG, once SIGXFSZ is
  ignored — `mgpukit.signals`) or a crash mid-write leaves the previous file as it was and no
  temporary file; the failure is an `OutputError`, one sentence naming the file and the cause.
- `write_all(outputs)`: several outputs of one run, each tried even when an earlier one
  failed — a full disk for the trace must not cost the record that had room.
- `to_json`: strict JSON (`allow_nan=False`). Python's `json` writes NaN and ±inf as bare
  `NaN` / `Infinity` tokens that other JSON readers refuse; a non-finite float is written as
  the string "NaN", "Infinity" or "-Infinity" instead, and `from_json` turns those back.

No torch here: the cost model writes through it too.
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mgpukit.signals import ignore_file_size_limit

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def check_output(path: str | os.PathLike, *, what: str = "output file", overwrite: bool = True,
                 directory: bool = False, force_hint: str = "--force") -> Path:
    """Raise ValueError (one sentence: what is wrong and what to do) if `path` cannot be written.

    `directory=True`: `path` is a folder to create or fill. `overwrite=False`: an existing file
    is refused (say `force_hint` to allow it). Nothing is created here."""
    if str(path).strip() == "":  # before Path(), which reads "" as "."
        raise ValueError(f"the {what} path is empty; give a {'folder' if directory else 'file'} name.")
    path = Path(path).expanduser()
    if path.exists():
        if directory and not path.is_dir():
            raise ValueError(f"{what} {path} exists and is not a directory; choose another path.")
        if not directory and path.is_dir():
            raise ValueError(f"{what} {path} is a directory; give a file name inside it.")
        if not directory and not overwrite:
            raise ValueError(f"{what} {path} already exists; pass {force_hint} to overwrite it, "
                             f"or choose another path.")
        _try_creating_a_file(path if directory else path.parent, path, what)
        return path
    ancestor = path.parent
    while not ancestor.exists():  # the folders that would be created
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"cannot write {what} {path}: {ancestor} is a file, not a directory.")
    _try_creating_a_file(ancestor, path, what)
    return path


def _try_creating_a_file(folder: Path, path: Path, what: str) -> None:
    """Create and remove a temporary file in `folder`; ValueError naming `path` if it fails."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".mgpukit-probe.", dir=folder)
    except OSError as e:
        raise ValueError(f"cannot write {what} {path}: {folder} does not take new files "
                         f"({e.strerror or e}); choose a writable folder.") from None
    os.close(fd)
    os.unlink(probe)


class OutputError(OSError):
    """A file could not be written. `path` is the file; the message names it, the cause and what
    to do, in one sentence; the file's previous content, if any, is untouched."""

    exit_code = 2  # the CLI prints the message alone, also when a worker raised it

    def __init__(self, message: str, *, path=None):
        super().__init__(message)
        self.path = path


def describe_os_error(e: BaseException) -> str:
    """The cause of a failed write in words, with the remedy for the usual ones."""
    code = getattr(e, "errno", None)
    text = getattr(e, "strerror", None) or str(e)
    if code == errno.ENOSPC:
        return f"{text} (the disk is full: free some space, or write elsewhere)"
    if code == errno.EFBIG:
        return f"{text} (over the file-size limit: see `ulimit -f`)"
    if code == errno.EDQUOT:
        return f"{text} (over your disk quota)"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{text} (choose a writable place)"
    return text


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, what: str = "file") -> Iterator[Path]:
    """Yield a temporary path next to `path`; when the block ends without error it replaces
    `path` in one rename (after an fsync), else it is deleted and `path` is left untouched.
    An OSError on the way (the block's own writes included) becomes an `OutputError` naming
    `what` and `path`."""
    ignore_file_size_limit()  # a write past `ulimit -f` fails instead of killing us mid-file
    path = Path(path).expanduser()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
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
        _fsync_dir(path.parent)
    except OutputError:
        raise
    except OSError as e:
        raise OutputError(f"cannot write {what} {path}: {describe_os_error(e)}; {path.name} "
                          f"is left as it was.", path=path) from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (best effort: not every system opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes, *, what: str = "file") -> Path:
    """Write `data` to `path` atomically (see `atomic_path`)."""
    with atomic_path(path, what=what) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, *, what: str = "file") -> Path:
    """Write `text` to `path` atomically (see `atomic_path`)."""
    return write_bytes(path, text.encode("utf-8"), what=what)


def write_all(outputs, *, failed=()) -> list[Path]:
    """Run each `(what, path, write)` of `outputs` — `write(path)` writes one file — even when
    an earlier one failed; then raise one `OutputError` naming every failure (with `failed`,
    messages of failures that happened elsewhere) and what *was* written. Returns the paths
    written."""
    done, failed = [], list(failed)
    for what, path, write in outputs:
        try:
            write(path)
            done.append((what, Path(path)))
        except OSError as e:
            failed.append(str(e) if isinstance(e, OutputError) else
                          f"cannot write {what} {path}: {describe_os_error(e)}")
    if failed:
        kept = f" Written: {', '.join(f'{w} {p}' for w, p in done)}." if done else ""
        raise OutputError(" ".join(" ".join(failed).split()) + kept)
    return [p for _, p in done]


def export_profiler_trace(prof, path: str | os.PathLike, *, what: str = "torch.profiler trace") -> Path:
    """`prof.export_chrome_trace` (torch.profiler), atomically, and checked.

    Kineto writes ``<file>.tmp`` and renames it; when the write fails it only logs "Failed to
    write to log file!", returns as if it had succeeded and leaves the ``.tmp`` behind. So the
    trace goes to a temporary file here, its kineto leftover is removed, and it counts as
    written only if it is there and parses as JSON."""
    with atomic_path(path, what=what) as tmp:
        prof.export_chrome_trace(str(tmp))
        leftover = Path(f"{tmp}.tmp")
        if leftover.exists():  # kineto keeps errno to itself: say what is likely
            leftover.unlink()
            free, limit = free_bytes(tmp.parent), file_size_limit()
            code = (errno.ENOSPC if free is not None and free < 1 << 20 else
                    errno.EFBIG if limit is not None else errno.EIO)
            raise OSError(code, f"torch.profiler could not write the trace ({free_bytes_text(free)} "
                                f"free, file-size limit {'none' if limit is None else f'{limit} B'})")
        try:
            with open(tmp, "rb") as f:
                json.load(f)
        except (OSError, ValueError) as e:
            raise OSError(errno.EIO, f"torch.profiler wrote an incomplete trace ({e})") from None
    return Path(path)


def file_size_limit() -> int | None:
    """This process's file-size limit in bytes (`ulimit -f`), None when unlimited or unknown."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def free_bytes_text(free: int | None) -> str:
    return "unknown space" if free is None else f"{free / 2**20:.1f} MiB"


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes free on the file system holding `folder` (None when it cannot be asked)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


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
