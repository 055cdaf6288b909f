"""A checkpoint folder you can trust: a manifest with a checksum per file, one run at a time,
the newest K kept, nothing reaching outside the folder.

`training/checkpoint.py` decides *what* a checkpoint holds (DCP's files, under the unsplit
model's names); this module decides how a folder of them is kept:

- **A manifest per checkpoint** (``step-K/manifest.json``): the run's model, optimizer, step
  and world size, and each file's size and SHA-256, written by rank 0 once every rank has
  written its files, *before* the folder is renamed into place. A checkpoint without one was
  never finished. On resume every file is checked against it: a flipped byte, a truncated
  file or a missing one is refused in one sentence naming the file — never handed to
  `torch.load` (whose error for a damaged file is a bare `EOFError`, an "unexpected pos", or
  advice to pass `weights_only=False`, which would run whatever the file says).
- **One run per folder** (`FolderLock`): the process that launches a run holds an exclusive
  `flock` on ``<dir>/.lock`` until the run ends; a second run given the same folder is refused
  before it starts (two runs used to overwrite each other's checkpoints, both exiting 0). The
  kernel drops the lock when its holder dies, however it dies: no stale lock to clean up.
  A new run (not `--resume`) into a folder that already holds checkpoints is refused as well:
  it would prune the older run's checkpoints away.
- **The newest K** (`prune`, knob ``keep_checkpoints``, default 3): older ``step-*`` folders
  are deleted once `latest` points to the new one; leftovers of a save that crashed
  (``*.partial``) are deleted before the next save.
- **Inside itself**: `latest` is a file naming a ``step-N`` folder of the same folder (never a
  path: ``..``, absolute); `latest`, the step folders, their files, the manifest and ``.lock``
  are never links (the lock is opened with ``O_NOFOLLOW``: a linked ``.lock`` used to truncate
  its target); pruning and the clean-up of partial saves never follow one. Every manifest field
  is type-checked (`_check_manifest`): a damaged or edited manifest is one line, not a
  traceback from the ranks.
- **Checks before launch** (`checkpoint_data.check_folder`): there is a checkpoint; its files
  match their checksums; it was written by a run like this one (model and sizes, optimizer,
  global batch, seed) and holds the state this run loads, name by name and shape by shape; it
  is not already past ``steps``. A refused run leaves no ``.lock``, nor the folders it made.

A save that fails (a full disk, `ulimit -f`) raises `CheckpointWriteError` on every rank — one
line from the CLI, exit 2 — after rank 0 removed the partial folder: the previous checkpoint and
`latest` are as they were.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path

from mgpukit.files import (OutputError, describe_os_error, file_size_limit, free_bytes, free_bytes_text,
                           write_text)
from mgpukit.strict_json import to_json

LATEST = "latest"
MANIFEST = "manifest.json"
METADATA = ".metadata"  # DCP's index of the tensors: every checkpoint has one
LOCK = ".lock"
FORMAT = 1
DEFAULT_KEEP = 3
_STEP = re.compile(r"^step-(\d+)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# what the manifest records of the run that saved it, with the type each must have
RUN_FIELDS = {"model": str, "optimizer": str, "world_size": int, "global_batch": int, "seed": int, "step": int}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for this run; the message says which file and why."""

    exit_code = 2  # one line from the CLI, also when a worker raised it (runtime/failures.py)


class CheckpointWriteError(OutputError):
    """A save that failed; its partial folder was removed, the previous checkpoint is intact."""


# ---- the manifest ------------------------------------------------------------------------------
def sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, info: dict) -> None:
    """Checksum every file of `folder` (DCP's data and ``.metadata``) into its manifest."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    write_text(folder / MANIFEST, to_json({"format": FORMAT, **info, "files": files}, indent=1) + "\n",
               what="checkpoint manifest")


def read_manifest(folder: Path) -> dict:
    """The manifest of checkpoint `folder`, every field type-checked (`_check_manifest`)."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(_read_inside(path))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {folder} has no {MANIFEST}: it was never finished (or was "
                              f"written by an mgpukit without checksums); resume from another one or "
                              f"start over in an empty folder.") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: its {MANIFEST} is unreadable ({_why_unreadable(e)}); the "
                              f"folder is damaged — resume from another checkpoint or start over.") from None
    _check_manifest(folder, manifest)
    return manifest


def _check_manifest(folder, manifest) -> None:
    """Every field the kit writes, with its type and range: a damaged or hand-edited manifest
    is refused here in one line, not by a traceback from inside the workers."""
    if not isinstance(manifest, dict) or type(manifest.get("format")) is not int or manifest["format"] != FORMAT:
        raise CheckpointError(f"checkpoint {folder}: {MANIFEST} is not one this mgpukit writes "
                              f"(format {manifest.get('format') if isinstance(manifest, dict) else '?'}).")

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {folder}: {MANIFEST} {what}; the folder is damaged or was "
                               f"edited — resume from another checkpoint or start over.")
    for key, kind in RUN_FIELDS.items():  # the step always; the run's fields when saved with them
        value = manifest.get(key)
        if key not in manifest and key != "step":
            continue
        if type(value) is not kind:  # `type`: True is an int to isinstance
            raise bad(f"gives {key} as {value!r} where {'a string' if kind is str else 'a whole number'} belongs")
        if kind is int and key != "seed" and value < 1:
            raise bad(f"gives {key} = {value}, where it is at least 1")
    if "model_config" in manifest and not isinstance(manifest["model_config"], dict):
        raise bad(f"gives model_config as {manifest['model_config']!r} where the model's sizes belong")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise bad(f"gives files as {files!r} where a table of file name -> size and checksum belongs")
    for name, want in files.items():
        if not _plain_name(name) or name == MANIFEST:
            raise bad(f"lists the file {name!r}: a checkpoint's files are plain names inside its folder")
        if not (isinstance(want, dict) and type(want.get("bytes")) is int and want["bytes"] >= 0
                and isinstance(want.get("sha256"), str) and _SHA256.match(want["sha256"])):
            raise bad(f"gives {name} as {want!r} where {{\"bytes\": a size, \"sha256\": 64 hex digits}} belongs")
    if METADATA not in files:
        raise bad(f"does not list {METADATA}, the index every checkpoint has (files: {sorted(files)})")


def verify(folder: Path) -> dict:
    """The manifest of `folder`, once every file it lists is there, whole and unchanged — and
    a regular file inside the folder, never a link out of it."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    hint = "restore the folder from a copy, or delete it to resume from an older checkpoint"
    for name, want in manifest["files"].items():
        path = folder / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {folder}: {name} is missing; {hint}.") from None
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"checkpoint {folder}: {name} is {_kind(st)}, not a file of the checkpoint's "
                                  f"own (nothing in it may point outside the folder); {hint}.")
        if st.st_size != want["bytes"]:
            raise CheckpointError(f"checkpoint {folder}: {name} has {st.st_size} bytes where {want['bytes']} were "
                                  f"written (truncated or overwritten); {hint}.")
        if sha256(path) != want["sha256"]:
            raise CheckpointError(f"checkpoint {folder}: {name} does not match its checksum (its bytes "
                                  f"changed after it was written: a disk error, or an edit); {hint}.")
    return manifest


def _plain_name(name) -> bool:
    """A file name that stays in its folder: no separator, not `.` or `..`, no NUL."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name \
        and (os.altsep is None or os.altsep not in name)


def _kind(st: os.stat_result) -> str:
    return ("a symbolic link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
            else "not a regular file")


def _read_inside(path: Path) -> str:
    """The text of `path`, opened without following a link (ELOOP if it is one)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read(1 << 20).decode()


def _why_unreadable(e: Exception) -> str:
    if isinstance(e, OSError) and e.errno == errno.ELOOP:
        return "it is a symbolic link; nothing in a checkpoint may point outside its folder"
    return str(e)


# ---- the folder ----------------------------------------------------------------------------------
def has_checkpoint(root) -> bool:
    return os.path.lexists(Path(root) / LATEST)


def latest(root) -> Path:
    """The checkpoint `<root>/latest` names: a step folder of `root` itself — `latest` a file
    (not a link) holding a name like ``step-000004``, never a path (``..``, absolute)."""
    root = Path(root)
    pointer = root / LATEST
    try:
        name = _read_inside(pointer).strip()
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint to resume from in {root} (no {LATEST} file); "
                              f"run once with checkpoint_dir={root} (--checkpoint-dir) first.") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{pointer} is unreadable ({_why_unreadable(e)}); the kit writes it as a file "
                              f"naming a step folder — remove it, or give another --checkpoint-dir.") from None
    if not _STEP.match(name):
        raise CheckpointError(f"{pointer} names {name[:80]!r}, not a step folder of {root} (step-NNNNNN): "
                              f"refusing to follow it outside the folder.")
    folder = root / name
    if folder.is_symlink():
        raise CheckpointError(f"{folder} is a symbolic link; a checkpoint folder keeps its checkpoints "
                              f"inside itself — replace the link by the folder, or start over.")
    return folder


def steps(root) -> list[Path]:
    """The finished checkpoints of `root`, oldest first (links are not checkpoints of it)."""
    found = [(int(m.group(1)), p) for p in Path(root).glob("step-*")
             if (m := _STEP.match(p.name)) and p.is_dir() and not p.is_symlink()]
    return [p for _, p in sorted(found)]


def check_inside(root) -> None:
    """Refuse a checkpoint folder whose own entries (`latest`, the lock, step folders) are
    links: the kit never makes one there, and a save or a prune must not reach through it."""
    root = Path(root)
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        if p.is_symlink() and (p.name in (LATEST, LOCK) or p.name.startswith("step-")):
            raise CheckpointError(f"{p} is a symbolic link; a checkpoint folder keeps its checkpoints inside "
                                  f"itself (the kit never writes a link there) — remove it, or give another "
                                  f"--checkpoint-dir.")


def remove_partials(root) -> None:
    """Delete what saves that crashed left (``step-*.partial``): no run writes here but ours."""
    for p in Path(root).glob("step-*.partial"):
        if not p.is_symlink():  # never through a link
            shutil.rmtree(p, ignore_errors=True)


def prune(root, keep: int, current: str) -> list[Path]:
    """Delete all but the newest `keep` checkpoints (never `current`, the one `latest` names)."""
    done = steps(root)
    gone = [p for p in done[:-keep] if p.name != current] if keep >= 1 else []
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def write_failure(final: Path, root: Path, error: BaseException) -> CheckpointWriteError:
    """The one-line error of a save that failed (a full disk, a file-size limit, ...)."""
    cause = _os_cause(error) or _short_write(error, root)
    text = describe_os_error(cause) if cause is not None else " ".join(str(error).split())[:300]
    try:
        before = latest(root).name
    except CheckpointError:
        before = None
    kept = f"the previous checkpoint ({before}) is intact" if before else "no earlier checkpoint existed"
    return CheckpointWriteError(f"cannot save checkpoint {final}: {text}; {kept} and no partial "
                                f"folder is left.", path=final)


def _os_cause(error: BaseException):
    """The first OSError in `error`, its causes, or DCP's per-rank failures."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return e
        todo += [e.__cause__, e.__context__]
        failures = getattr(e, "failures", None)  # torch.distributed.checkpoint's CheckpointException
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) else f for f in failures.values()]
    return None


def _short_write(error: BaseException, root: Path):
    """torch's zip writer reports a full disk as "unexpected pos 704 vs 598", without errno:
    name the likely cause from the free space and the file-size limit."""
    if "unexpected pos" not in str(error) and "PytorchStreamWriter failed" not in str(error):
        return None
    free, limit = free_bytes(root), file_size_limit()
    if free is not None and free < 64 * 2**20:
        return OSError(errno.ENOSPC, f"No space left on device ({free_bytes_text(free)} free)")
    if limit is not None:
        return OSError(errno.EFBIG, f"File too large (the limit is {limit} bytes)")
    return OSError(errno.EIO, f"a write stopped short ({free_bytes_text(free)} free)")


class FolderLock:
    """An exclusive lock on a checkpoint folder for as long as one run uses it (module docstring).

    Taken by the process that launches the run (the workers it forks share the folder as one
    run); `release()` or the holder's death frees it. The lock file is opened without following
    a link (a ``.lock`` linked to a user's file must not truncate it) and must be a regular
    file. `release()` removes what the lock made: the ``.lock`` file, and the folders it created
    if the run left them empty (a refused run leaves nothing behind)."""

    def __init__(self, root):
        self.root, self._fd, self._made = Path(root), None, []

    def acquire(self) -> "FolderLock":
        try:
            import fcntl
        except ImportError:  # no flock on this system: one run per folder is up to the user
            return self
        self._made = _make_folders(self.root)
        path = self.root / LOCK
        try:
            for _ in range(100):  # a holder removing the file as we lock it: lock the new one
                fd = self._open(path)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                    os.close(fd)
                    raise CheckpointError(f"checkpoint folder {self.root} is in use by another run ({holder}); "
                                          f"give this run its own --checkpoint-dir (checkpoint_dir), or wait "
                                          f"for that one to end.") from None
                if _same_file(fd, path):
                    break
                os.close(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        except CheckpointError:
            self._remove_made()
            raise
        self._fd = fd
        return self

    def _open(self, path: Path) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as e:
            what = "a symbolic link" if e.errno == errno.ELOOP else describe_os_error(e)
            raise CheckpointError(f"cannot lock checkpoint folder {self.root}: {path} is {what}; the kit "
                                  f"never follows a link there — remove it, or give another "
                                  f"--checkpoint-dir.") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CheckpointError(f"cannot lock checkpoint folder {self.root}: {path} is not a regular file "
                                  f"(a device, a FIFO?); remove it, or give another --checkpoint-dir.")
        return fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.root / LOCK)  # while still holding it: `_same_file` in acquire
            except OSError:
                pass
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
        self._remove_made()

    def _remove_made(self) -> None:
        for folder in reversed(self._made):  # innermost first; only if the run left it empty
            try:
                folder.rmdir()
            except OSError:
                break
        self._made = []

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def _make_folders(root: Path) -> list[Path]:
    """Create `root` and its missing parents; the ones created, outermost first."""
    missing = []
    p = root
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    root.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
