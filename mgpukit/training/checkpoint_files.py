"""A checkpoint folder you can trust: a manifest with a checksum per file, one run at a time,
the newest K kept, and every check made before anything launches.

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
- **Checks before launch** (`check_resume`): there is a checkpoint; its files match their
  checksums; it was written for this model and this optimizer (an SGD checkpoint has momentum
  buffers where AdamW needs moments); it is not already past ``steps``.

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
from pathlib import Path

from mgpukit.files import (OutputError, describe_os_error, file_size_limit, free_bytes, free_bytes_text,
                           to_json, write_text)

LATEST = "latest"
MANIFEST = "manifest.json"
LOCK = ".lock"
FORMAT = 1
DEFAULT_KEEP = 3
_STEP = re.compile(r"^step-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for this run; the message says which file and why."""

    exit_code = 2  # one line from the CLI, also when a worker raised it (runtime/failures.py)


class CheckpointWriteError(OutputError):
    """A save that failed; its partial folder was removed, the previous checkpoint is intact."""


# ---- the manifest ------------------------------------------------------------------------------
def sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
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
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {folder} has no {MANIFEST}: it was never finished (or was "
                              f"written by an mgpukit without checksums); resume from another one or "
                              f"start over in an empty folder.") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: its {MANIFEST} is unreadable ({e}); the folder "
                              f"is damaged — resume from another checkpoint or start over.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(
            manifest.get("files"), dict):
        raise CheckpointError(f"checkpoint {folder}: {MANIFEST} is not one this mgpukit writes "
                              f"(format {manifest.get('format') if isinstance(manifest, dict) else '?'}).")
    return manifest


def verify(folder: Path) -> dict:
    """The manifest of `folder`, once every file it lists is there, whole and unchanged."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    for name, want in manifest["files"].items():
        path = folder / name
        hint = "restore the folder from a copy, or delete it to resume from an older checkpoint"
        if not path.is_file():
            raise CheckpointError(f"checkpoint {folder}: {name} is missing; {hint}.")
        size = path.stat().st_size
        if size != want["bytes"]:
            raise CheckpointError(f"checkpoint {folder}: {name} has {size} bytes where {want['bytes']} were "
                                  f"written (truncated or overwritten); {hint}.")
        if sha256(path) != want["sha256"]:
            raise CheckpointError(f"checkpoint {folder}: {name} does not match its checksum (its bytes "
                                  f"changed after it was written: a disk error, or an edit); {hint}.")
    return manifest


# ---- the folder ----------------------------------------------------------------------------------
def has_checkpoint(root) -> bool:
    return (Path(root) / LATEST).is_file()


def latest(root) -> Path:
    root = Path(root)
    pointer = root / LATEST
    if not pointer.is_file():
        raise CheckpointError(f"no checkpoint to resume from in {root} (no {LATEST} file); "
                              f"run once with checkpoint_dir={root} (--checkpoint-dir) first.")
    return root / pointer.read_text().strip()


def steps(root) -> list[Path]:
    """The finished checkpoints of `root`, oldest first."""
    found = [(int(m.group(1)), p) for p in Path(root).glob("step-*")
             if (m := _STEP.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def remove_partials(root) -> None:
    """Delete what saves that crashed left (``step-*.partial``): no run writes here but ours."""
    for p in Path(root).glob("step-*.partial"):
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
    run); `release()` or the holder's death frees it."""

    def __init__(self, root):
        self.root, self._fd = Path(root), None

    def acquire(self) -> "FolderLock":
        try:
            import fcntl
        except ImportError:  # no flock on this system: one run per folder is up to the user
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CheckpointError(f"checkpoint folder {self.root} is in use by another run ({holder}); "
                                  f"give this run its own --checkpoint-dir (checkpoint_dir), or wait "
                                  f"for that one to end.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# ---- before launch -------------------------------------------------------------------------------
def check_folder(cfg) -> dict | None:
    """Every check of ``checkpoint_dir`` that can be made before launch; the manifest of the
    checkpoint a resume starts from (None when not resuming). Raises `CheckpointError`."""
    root = cfg.options.get("checkpoint_dir")
    if not root:
        return None
    if not cfg.options.get("resume"):
        if has_checkpoint(root):
            raise CheckpointError(f"{root} already holds checkpoints (latest: {latest(root).name}); add "
                                  f"--resume (resume=true) to go on from them, or give an empty "
                                  f"--checkpoint-dir: a new run would prune them away.")
        return None
    return check_resume(root, cfg)


def check_resume(root, cfg) -> dict:
    """The checkpoint `latest` names exists, is whole, and fits `cfg`; returns its manifest."""
    folder = latest(root)
    if not folder.is_dir():
        raise CheckpointError(f"{root}/{LATEST} names {folder.name}, which does not exist; point it at "
                              f"one of {[p.name for p in steps(root)] or 'no checkpoint'}, or start over.")
    manifest = verify(folder)
    for key, want in (("model", cfg.model), ("optimizer", cfg.optimizer)):
        if manifest.get(key) != want:
            raise CheckpointError(
                f"checkpoint {folder} was saved by a run with {key}={manifest.get(key)!r}; this run has "
                f"{key}={want!r} ({_why(key)}). Resume with --{key.replace('_', '-')} {manifest.get(key)}, "
                f"or start over in another folder.")
    step = manifest.get("step")
    if isinstance(step, int) and step >= cfg.steps:
        raise CheckpointError(f"checkpoint {folder} is at step {step}; steps={cfg.steps} leaves nothing to "
                              f"run — give --steps more than {step} to go on from it.")
    return manifest


def _why(key: str) -> str:
    return ("its weights have other names and shapes" if key == "model" else
            "SGD saves momentum buffers where AdamW needs its two moments and a step count")
