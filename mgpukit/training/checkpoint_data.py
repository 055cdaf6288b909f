"""A checkpoint is data, never code: how the kit reads a checkpoint it may not have written,
and every check of it made before a resume launches (`check_folder`).

The threat. A checkpoint folder from elsewhere — a shared drive, a download, course material,
the bucket a spot instance saved to — is input like any other file. DCP's own reader trusts
it twice: it unpickles ``.metadata`` with plain `pickle.load`, and an entry that ``.metadata``
declares as `BytesStorageMetadata` makes its default load planner call
``torch.load(weights_only=False)`` on bytes the checkpoint supplies. Either runs whatever a
crafted file says. The manifest's SHA-256 sums (`checkpoint_files.py`) do not stop that:
whoever crafts the folder recomputes them. A checksum detects *damage* (a flipped bit, a
truncated copy), not *tampering*; only a signature would, and the kit has no key to sign with.

So nothing is unpickled beyond an allow-list, and what the metadata declares is checked as
data before any of it is read:

1. ``.metadata`` is unpickled by `_MetadataUnpickler`: DCP's own metadata classes,
   `torch.Size`, dtypes, layouts and paths; any other global (``os.system``,
   ``builtins.eval``) is refused before it can be called.
2. `check_metadata`: every entry is a tensor (`TensorStorageMetadata`; the kit never saves
   bytes, so a `BytesStorageMetadata` entry is refused and ``torch.load(weights_only=False)``
   is never reached), its chunks lie inside its shape and each is stored in a file the
   manifest lists (a plain name inside the folder), at a byte range inside that file, with no
   stream transform. The tensors themselves DCP reads with ``torch.load(weights_only=True)``.
3. `check_entries` (before launch): the entries are the state *this run* expects — the
   model's parameters by name and shape (the model built on the meta device: no memory), the
   optimizer's state keys, the step, each saved rank's logs and RNG state. Anything else — a
   name this model lacks, a shape of other sizes, a dtype the kit never saves there — is
   refused in one line naming it. In the ranks the load planner checks what it reads once more
   and refuses bytes outright (`checkpoint._LoadPlanner`), for scripts that skip the pre-check.

Before launch (`check_resume`), the manifest must also say the checkpoint was saved by a run
like this one: the same model and sizes (``model_config``: some sizes, the head count, change
no shape), optimizer, global batch and seed. Only the number of workers may differ — a
checkpoint holds the unsplit model and reshards (`checkpoint.py`). There is no flag to resume
anyway: what differs could not load (a shape, an optimizer's state) or would quietly make the
record another run's (the batch, the seed).

Reference: PyTorch's `torch.load` documentation ("never load data from an untrusted source"
with ``weights_only=False``) and its ``weights_only`` unpickler, whose allow-list idea
`_MetadataUnpickler` applies to DCP's metadata.
"""
from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta, TensorStorageMetadata

from mgpukit.training.building import build_model_shapes
from mgpukit.training.checkpoint_files import (LATEST, MANIFEST, METADATA, RUN_FIELDS, CheckpointError, check_inside,
                                               has_checkpoint, latest, read_manifest, steps, verify)

_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_SAFE_GLOBALS = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
                 ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
                 ("pathlib", "PureWindowsPath"), ("pathlib", "Path")}

# the optimizer state the kit's optimizers keep per parameter: shaped like it, or a scalar
_ELEMENTWISE = {"sgd": {"momentum_buffer"}, "adamw": {"exp_avg", "exp_avg_sq"}}
_SCALARS = {"sgd": set(), "adamw": {"step"}}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata and nothing else: any other global (os.system, builtins.eval,
    a class whose constructor does I/O) is refused before it can be called."""

    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout,
                                                                           torch.memory_format)):
            return getattr(torch, name)
        if module in _DCP_MODULES and not name.startswith("__"):
            value = super().find_class(module, name)
            if isinstance(value, type):  # DCP's dataclasses and enums, not its functions
                return value
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}, which a "
                                     f"checkpoint never contains: refusing to load it (a crafted "
                                     f"file can run code when unpickled).")


class SafeReader(dcp.FileSystemReader):
    """`FileSystemReader` whose metadata is unpickled through `_MetadataUnpickler` and checked
    against the folder's manifest (`check_metadata`) before DCP plans a single read."""

    def read_metadata(self, *args, **kwargs):
        folder = Path(self.path)
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            try:
                metadata = _MetadataUnpickler(f).load()
            except pickle.UnpicklingError as e:
                raise CheckpointError(f"{folder}: {e}") from None
            except Exception as e:  # noqa: BLE001 — garbage: EOFError, ValueError, TypeError, ...
                raise CheckpointError(f"checkpoint {folder}: {METADATA} is not DCP metadata "
                                      f"({type(e).__name__}: {e}); restore it from a copy.") from None
        check_metadata(metadata, folder, read_manifest(folder)["files"])
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _sizes(value) -> bool:
    return isinstance(value, torch.Size) and all(isinstance(n, int) and n >= 0 for n in value)


def check_metadata(metadata, folder, files: dict) -> None:
    """Refuse (`CheckpointError`) metadata that declares anything but tensors stored inside
    `files` (the manifest's: name -> {"bytes", "sha256"}) — module docstring, 2."""
    where = f"checkpoint {folder}: {METADATA}"
    if not (isinstance(metadata, Metadata) and isinstance(metadata.state_dict_metadata, dict)
            and isinstance(metadata.storage_data, dict)):
        raise CheckpointError(f"{where} is not DCP metadata (a {type(metadata).__name__}); restore it from a copy.")
    stored = metadata.storage_data
    for key, meta in metadata.state_dict_metadata.items():
        if not isinstance(meta, TensorStorageMetadata):
            raise CheckpointError(
                f"{where} declares {key!r} as {type(meta).__name__}: the kit saves tensors only, and "
                f"loading anything else would unpickle bytes of the checkpoint (code, if it was "
                f"crafted) — refusing it.")
        if not (isinstance(key, str) and _sizes(meta.size) and isinstance(meta.properties.dtype, torch.dtype)
                and isinstance(meta.chunks, list)):
            raise CheckpointError(f"{where}: the entry {key!r} is malformed; restore the folder from a copy.")
        for chunk in meta.chunks:
            if not (_sizes(chunk.offsets) and _sizes(chunk.sizes) and len(chunk.offsets) == len(chunk.sizes)
                    == len(meta.size) and all(o + s <= n for o, s, n in zip(chunk.offsets, chunk.sizes, meta.size))):
                raise CheckpointError(f"{where}: a chunk of {key!r} lies outside its shape "
                                      f"{tuple(meta.size)}; restore the folder from a copy.")
            if MetadataIndex(key, chunk.offsets) not in stored:
                raise CheckpointError(f"{where}: a chunk of {key!r} has no stored data; restore the "
                                      f"folder from a copy.")
    for index, info in stored.items():
        name = getattr(info, "relative_path", None)
        if not (isinstance(index, MetadataIndex) and isinstance(info, _StorageInfo) and isinstance(name, str)):
            raise CheckpointError(f"{where}: its storage table is malformed; restore the folder from a copy.")
        if name not in files or name == METADATA:
            raise CheckpointError(f"{where} reads {index.fqn!r} from {name!r}, which is not one of the "
                                  f"checkpoint's files (its manifest lists {sorted(files)}): refusing "
                                  f"to read outside the folder.")
        if not (isinstance(info.offset, int) and isinstance(info.length, int) and info.offset >= 0
                and info.length >= 0 and info.offset + info.length <= files[name]["bytes"]):
            raise CheckpointError(f"{where} reads {index.fqn!r} at bytes {info.offset!r}+{info.length!r} "
                                  f"of {name}, which has {files[name]['bytes']}; restore the folder from a copy.")
        if info.transform_descriptors:  # compression etc.: the kit's saves use none
            raise CheckpointError(f"{where} asks for stream transforms {info.transform_descriptors!r} on "
                                  f"{index.fqn!r}; the kit saves none — refusing them.")


def expected_entries(cfg, *, world_size: int, step: int) -> tuple[dict, dict]:
    """What a checkpoint of `cfg`'s run at `step`, saved by `world_size` ranks, holds: the
    entries it must hold ({key: (shape, dtype or None)}) and those it may hold (the optimizer's
    state: made at a parameter's first update)."""
    # the model on the meta device: names and shapes, no memory (a 7 B model costs nothing)
    params = {n: tuple(p.shape) for n, p in build_model_shapes(cfg).named_parameters() if p.requires_grad}
    must = {"step": ((), torch.int64)}
    for r in range(world_size):
        must[f"logs/rank{r}"] = ((step, 2), torch.float64)
        must[f"rng/rank{r}"] = (tuple(torch.get_rng_state().shape), torch.uint8)
    must.update({f"model/{n}": (shape, None) for n, shape in params.items()})
    may = {f"optim/{n}/{k}": (shape, None) for n, shape in params.items() for k in _ELEMENTWISE.get(cfg.optimizer, ())}
    may.update({f"optim/{n}/{k}": ((), None) for n in params for k in _SCALARS.get(cfg.optimizer, ())})
    return must, may


def check_entries(folder, metadata, cfg, manifest: dict) -> None:
    """Refuse a checkpoint whose entries are not the state `cfg`'s run expects, by name, shape
    and dtype (module docstring, 3.), in one line naming the first that differs."""
    must, may = expected_entries(cfg, world_size=manifest["world_size"], step=manifest["step"])
    saved = metadata.state_dict_metadata
    for key, meta in sorted(saved.items(), key=lambda kv: not kv[0].startswith("model/")):  # weights first
        if key not in must and key not in may:
            raise CheckpointError(
                f"checkpoint {folder} holds {key!r}, which this run's {cfg.model} with {cfg.optimizer} has no "
                f"place for (saved by another model or world size, or crafted): refusing it.")
        shape, dtype = must.get(key) or may[key]
        if tuple(meta.size) != shape:
            raise CheckpointError(
                f"checkpoint {folder} holds {key} of shape {tuple(meta.size)}; this run's {cfg.model} has "
                f"{shape} (saved with other sizes: -o model_sizes, d_model, ...). Resume with the sizes "
                f"it was saved with, or start over in another folder.")
        if dtype is not None and meta.properties.dtype != dtype:
            raise CheckpointError(f"checkpoint {folder} holds {key} as {meta.properties.dtype}; the kit "
                                  f"saves it as {dtype}: refusing it.")
    missing = [k for k in must if k not in saved]
    if missing:
        raise CheckpointError(f"checkpoint {folder} lacks {missing[:3]}: it was saved by another model "
                              f"(or is damaged); resume with the model it was saved with, or start over.")


def check_contents(folder, cfg, manifest: dict) -> None:
    """Before launch: the checkpoint's metadata is safe to read (`SafeReader`) and holds the
    state `cfg`'s run expects (`check_entries`)."""
    metadata = SafeReader(str(folder)).read_metadata()
    check_entries(folder, metadata, cfg, manifest)


# ---- before launch -------------------------------------------------------------------------------
def check_folder(cfg) -> dict | None:
    """Every check of ``checkpoint_dir`` that can be made before launch; the manifest of the
    checkpoint a resume starts from (None when not resuming). Raises `CheckpointError`."""
    root = cfg.options.get("checkpoint_dir")
    if not root:
        return None
    check_inside(root)
    if not cfg.options.get("resume"):
        if has_checkpoint(root):
            raise CheckpointError(f"{root} already holds checkpoints (latest: {latest(root).name}); add "
                                  f"--resume (resume=true) to go on from them, or give an empty "
                                  f"--checkpoint-dir: a new run would prune them away.")
        return None
    return check_resume(root, cfg)


# what a resumed run must share with the run that saved (the world size may differ: resharding)
_MUST_MATCH = {
    "model": ("--model", "its weights have other names and shapes"),
    "optimizer": ("--optimizer", "SGD saves momentum buffers where AdamW needs its two moments and a step count"),
    "global_batch": ("--global-batch", "step k starts at sample k x global_batch: another batch would resume "
                                       "elsewhere in the data, and the record would not be one run's"),
    "seed": ("seed=", "the seed draws the batches: another one trains on other data from here on"),
}


def check_resume(root, cfg) -> dict:
    """The checkpoint `latest` names exists, is whole, was saved by a run like `cfg`'s (every
    field its manifest records but the world size) and holds the state `cfg`'s run loads;
    returns its manifest."""
    folder = latest(root)
    if not folder.is_dir():
        raise CheckpointError(f"{root}/{LATEST} names {folder.name}, which does not exist; point it at "
                              f"one of {[p.name for p in steps(root)] or 'no checkpoint'}, or start over.")
    manifest = verify(folder)
    unknown = [k for k in RUN_FIELDS if k not in manifest]
    if unknown:
        raise CheckpointError(f"checkpoint {folder} was saved without {unknown} in its {MANIFEST} (by "
                              f"save_checkpoint without info=): nothing says it fits this run — start over, "
                              f"or load it with load_into.")
    for key, (flag, why) in _MUST_MATCH.items():
        saved, want = manifest[key], getattr(cfg, key)
        if saved != want:
            give = f"{flag}{saved}" if flag.endswith("=") else f"{flag} {saved}"
            raise CheckpointError(
                f"checkpoint {folder} was saved by a run with {key}={saved!r}; this run has "
                f"{key}={want!r} ({why}). Resume with {give}, or start over in another folder.")
    if "model_config" in manifest:  # the sizes: some (n_head) change no parameter's shape
        want = dataclasses.asdict(cfg.model_config())
        diff = sorted(k for k in set(want) | set(manifest["model_config"]) if manifest["model_config"].get(k) != want.get(k))
        if diff:
            saved = ", ".join(f"{k}={manifest['model_config'].get(k)!r}" for k in diff)
            here = ", ".join(f"{k}={want.get(k)!r}" for k in diff)
            raise CheckpointError(f"checkpoint {folder} was saved by {cfg.model} with {saved}; this run's has "
                                  f"{here}. Resume with -o model_sizes giving the sizes it was saved with, "
                                  f"or start over in another folder.")
    if manifest["step"] >= cfg.steps:
        raise CheckpointError(f"checkpoint {folder} is at step {manifest['step']}; steps={cfg.steps} leaves "
                              f"nothing to run — give --steps more than {manifest['step']} to go on from it.")
    check_contents(folder, cfg, manifest)
    return manifest
