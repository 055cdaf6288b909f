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
- What is already at an output path decides how it is written (`output_target`): nothing or a
  regular file — the rename above; a symlink — followed, and its *target* replaced (the link
  stays; a dangling one is refused); the null device (`/dev/null`, or a node with its device
  number) — written through, never renamed over (as root that rename would replace
  `/dev/null` for the whole machine); any other device, FIFO, socket or folder — refused, since
  a rename would silently replace what the user pointed at.
- The temporary name is `.<name>.XXXXXXXX.tmp`: 14 bytes longer than the file's. It is checked
  with the final one against the file system's NAME_MAX and PATH_MAX before the work, so a
  250-character name is refused up front instead of failing after training.
- `check_distinct(outputs)`: two outputs of one run that are the same file (after symlinks,
  `..` and hard links) would overwrite each other; refused before the work.
- `write_all(outputs)`: several outputs of one run, each tried even when an earlier one
  failed — a full disk for the trace must not cost the record that had room.
- What goes into a JSON file is written strict (`to_json`, `from_json`): `mgpukit.strict_json`.

No torch here: the cost model writes through it too.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mgpukit.signals import ignore_file_size_limit


def check_output(path: str | os.PathLike, *, what: str = "output file", overwrite: bool = True,
                 directory: bool = False, force_hint: str = "--force") -> Path:
    """Raise ValueError (one sentence: what is wrong and what to do) if `path` cannot be written.

    `directory=True`: `path` is a folder to create or fill. `overwrite=False`: an existing file
    is refused (say `force_hint` to allow it). Nothing is created here."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"the {what} path {path!r}: give a str or a pathlib.Path.")
    if str(path).strip() == "":  # before Path(), which reads "" as "."
        raise ValueError(f"the {what} path is empty; give a {'folder' if directory else 'file'} name.")
    path = Path(path).expanduser()
    if directory:
        if path.exists():
            if not path.is_dir():
                raise ValueError(f"{what} {path} exists and is not a directory; choose another path.")
            _try_creating_a_file(path, path, what)
            return path
        _check_new(path, what)
        return path
    target, kind = output_target(path, what=what)
    if kind == NULL_DEVICE:
        return path  # written through: nothing to create, nothing to rename
    if kind == REGULAR and not overwrite:
        raise ValueError(f"{what} {path} already exists; pass {force_hint} to overwrite it, "
                         f"or choose another path.")
    check_name_lengths(target, what=what)
    if kind == REGULAR:
        _try_creating_a_file(target.parent, path, what)
    else:
        _check_new(target, what)
    return path


def _check_new(path: Path, what: str) -> None:
    """`path` does not exist: its nearest existing ancestor must be a folder that takes files."""
    ancestor = path.parent
    while not ancestor.exists():  # the folders that would be created
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"cannot write {what} {path}: {ancestor} is a file, not a directory.")
    _try_creating_a_file(ancestor, path, what)


# what `output_target` finds at an output path
NEW, REGULAR, NULL_DEVICE = "new", "regular file", "null device"


def _null_device() -> int | None:
    """The device number of /dev/null (major 1, minor 3 on Linux), None where there is none."""
    try:
        return os.stat(os.devnull).st_rdev
    except OSError:
        return None


def output_target(path: str | os.PathLike, *, what: str = "output file") -> tuple[Path, str]:
    """Where writing `path` really goes, and what is there: (file, NEW | REGULAR | NULL_DEVICE).

    A symlink is followed to what it names (the link itself is never replaced); a dangling link,
    a folder, a FIFO, a socket or a device other than the null device is refused with a
    ValueError saying what it is — a rename over it would replace it with a regular file."""
    path = Path(path).expanduser()
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (yet): see `_check_new`
        if path.is_symlink():
            raise ValueError(f"{what} {path} is a symlink to {os.readlink(path)}, which does not "
                             f"exist; remove the link or give another path.") from None
        return target, NEW
    except OSError as e:
        raise ValueError(f"cannot write {what} {path}: {describe_os_error(e)}.") from None
    if stat.S_ISREG(st.st_mode):
        return target, REGULAR
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == _null_device():
        return target, NULL_DEVICE
    via = f" (through the symlink {path})" if target != path else ""
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{what} {target}{via} is a directory; give a file name inside it.")
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    kind = next((k for test, k in kinds if test(st.st_mode)), "something other than a file")
    raise ValueError(f"{what} {target}{via} is {kind}, not a regular file; writing would replace "
                     f"it: choose a file name.")


TEMPORARY_EXTRA = len(".") + len(".") + 8 + len(".tmp")  # `.<name>.XXXXXXXX.tmp` (mkstemp: 8 chars)


def check_name_lengths(path: Path, *, what: str = "output file") -> None:
    """ValueError if `path` or its temporary name is longer than the file system allows: a name
    over NAME_MAX (255 bytes on most) or a path over PATH_MAX (4096) fails only when written."""
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    name_max, path_max = _limit(folder, "PC_NAME_MAX", 255), _limit(folder, "PC_PATH_MAX", 4096)
    name = len(os.fsencode(path.name)) + TEMPORARY_EXTRA
    if name > name_max:
        raise ValueError(f"{what} {path.name[:40]}…: the name is {name - TEMPORARY_EXTRA} bytes and "
                         f"its temporary name {name}, over this file system's {name_max}; "
                         f"give a shorter name.")
    full = len(os.fsencode(os.path.abspath(path))) + TEMPORARY_EXTRA
    if full >= path_max:
        raise ValueError(f"{what} {str(path)[:40]}…: the path (with its temporary name) is {full} "
                         f"bytes, over this system's {path_max - 1}; give a shorter path.")


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default


def check_distinct(outputs) -> None:
    """ValueError if two of `outputs` — `(label, path)` pairs, None paths skipped — are the same
    file after symlinks, `..` and hard links: the second write would replace the first. The
    null device may repeat (nothing is kept there)."""
    seen = {}
    for label, path in outputs:
        if path is None or str(path).strip() == "":
            continue
        real = Path(os.path.realpath(Path(path).expanduser()))
        try:
            st = os.stat(real)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == _null_device():
                continue
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = str(real)
        if key in seen:
            first_label, first = seen[key]
            raise ValueError(f"{first_label} and {label} are the same file ({first} and {path}); "
                             f"the second would overwrite the first: give each its own file.")
        seen[key] = (label, path)


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
    A symlink's target is replaced, not the link; the null device is yielded itself (written
    through); anything else that is not a regular file is refused (`output_target`).
    An OSError on the way (the block's own writes included) becomes an `OutputError` naming
    `what` and `path`."""
    ignore_file_size_limit()  # a write past `ulimit -f` fails instead of killing us mid-file
    path = Path(path).expanduser()
    try:
        target, kind = output_target(path, what=what)  # a link is followed; a device refused
    except ValueError as e:
        raise OutputError(f"{e} {path.name} is left as it was.", path=path) from None
    if kind == NULL_DEVICE:  # written through: a rename would replace the device node
        yield target
        return
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if target.exists():  # keep the permissions a user gave the file it replaces
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        _fsync_dir(target.parent)
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
