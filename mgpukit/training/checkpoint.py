"""Checkpoint and resume with `torch.distributed.checkpoint` (DCP), through the trainer's seam.

A checkpoint is what a run needs to go on as if it had never stopped: the weights, the
optimizer's state (SGD's momentum, Adam's moments and step), the next step to run, each rank's
RNG state. The data position needs nothing more: a batch depends only on (seed, step, data
rank), so the step *is* the position.

Every rank saves its own share in one collective call (`dcp.save`): replicas of a tensor
(data-parallel ranks hold the same weights) are written once, a pipeline stage writes only its
layers, and the names are the unsplit model's (`blocks.2.attn.q_proj.weight`,
`optim/blocks.2.attn.q_proj.weight/momentum_buffer`) — so the files describe the model, not
the layout that wrote them. Loading is `dcp.load` into this rank's tensors, in place (the
dp-bucketed strategy's gradients are views into its buckets; the parameters stay the same
objects).

Saving is atomic: the files go to ``<dir>/step-K.partial``, which is renamed to ``step-K``
once every rank has written, and only then does ``<dir>/latest`` (written atomically) point to
it. A crash while saving leaves the previous checkpoint, and `latest`, as they were.

Loading is safe: DCP reads a checkpoint's ``.metadata`` with plain `pickle.load`, which runs
whatever a crafted file tells it to. `SafeReader` unpickles it with an allow-list (DCP's own
metadata classes, `torch.Size`, dtypes, layouts, paths) and refuses anything else before it
runs; the tensors themselves DCP reads as raw bytes, and any pickled object with
`torch.load(weights_only=True)`.

Reference: PyTorch Distributed Checkpoint (torch.distributed.checkpoint), and torchtitan's
checkpointing, which saves the same pieces through it.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata

from mgpukit.files import write_text
from mgpukit.training.trainer import Checkpointing

LATEST = "latest"


def checkpointing(ctx, rec, cfg, parts, optimizer) -> Checkpointing | None:
    """The trainer's `Checkpointing` from the run's options (`checkpoint_dir`,
    `checkpoint_every`, `resume`); None when the run asked for none."""
    root = cfg.options.get("checkpoint_dir")
    if not root:
        if cfg.options.get("resume"):
            raise ValueError("resume=true needs checkpoint_dir=... to resume from.")
        return None
    every = cfg.options.get("checkpoint_every") or 0
    ck = Checkpointing()
    if cfg.options.get("resume"):
        ck.start_step = load_checkpoint(root, ctx, rec, parts, optimizer, logs=ck.logs)

    def on_step_end(step: int) -> None:
        if (every and (step + 1) % every == 0) or step + 1 == cfg.steps:
            save_checkpoint(root, step + 1, ctx, rec, parts, optimizer, logs=ck.logs)
    ck.on_step_end = on_step_end
    return ck


def _names(parts) -> dict[int, str]:
    """id(parameter) -> its name in the unsplit model (no DDP `module.`, no stage index)."""
    names = {}
    module = parts.module
    for name, p in module.named_parameters():
        if isinstance(module, torch.nn.ModuleList):  # pipeline stages: "0.blocks.2..." -> "blocks.2..."
            name = name.split(".", 1)[1]
        names[id(p)] = name.removeprefix("module.")
    return names


def _state(ctx, parts, optimizer, next_step: int, logs) -> dict:
    names = _names(parts)
    state = {"step": torch.tensor(next_step, dtype=torch.int64),
             # what this rank logged so far (loss, grad sq-norm per step): the resumed record
             # then covers the whole run, and its parity can be checked
             f"logs/rank{ctx.rank}": torch.tensor(logs, dtype=torch.float64).reshape(-1, 2)}
    for p in parts.params:
        if id(p) not in names:
            raise ValueError("checkpointing saves parameters the model owns by name; this strategy "
                             "trains flat shards of its own (hand-written ZeRO), which it cannot "
                             "save yet: use ddp, dp-bucketed, a pipeline, tp or fsdp2.")
        state[f"model/{names[id(p)]}"] = p.data
        for key, value in optimizer.state.get(p, {}).items():
            state[f"optim/{names[id(p)]}/{key}"] = value
    state[f"rng/rank{ctx.rank}"] = torch.get_rng_state()
    return state


def save_checkpoint(root, next_step: int, ctx, rec, parts, optimizer, *, logs=()) -> Path:
    """Save every rank's share as ``<root>/step-<next_step>`` (collective: every rank calls it)."""
    root = Path(root)
    final = root / f"step-{next_step:06d}"
    partial = root / f"step-{next_step:06d}.partial"
    with rec.untimed():
        dcp.save(_state(ctx, parts, optimizer, next_step, list(logs)), checkpoint_id=str(partial))
        _barrier()
        if ctx.rank == 0:
            if final.exists():  # an older save of the same step, e.g. a run resumed twice
                import shutil

                shutil.rmtree(final)
            os.replace(partial, final)
            write_text(root / LATEST, final.name + "\n")
        _barrier()
    return final


def has_checkpoint(root) -> bool:
    return (Path(root) / LATEST).is_file()


def latest(root) -> Path:
    root = Path(root)
    pointer = root / LATEST
    if not pointer.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from in {root} (no {LATEST} file); "
                                f"run once with checkpoint_dir={root} first.")
    return root / pointer.read_text().strip()


def load_checkpoint(root, ctx, rec, parts, optimizer, *, logs: list | None = None) -> int:
    """Load the latest checkpoint under `root` into this rank's parts and optimizer, in place
    (and the logged steps into `logs`); return the step to start from (collective)."""
    path = latest(root)
    reader = SafeReader(str(path))
    metadata = reader.read_metadata().state_dict_metadata
    names = _names(parts)
    by_name = {names[id(p)]: p for p in parts.params}
    state = _state(ctx, parts, optimizer, 0, [])
    logs_key = f"logs/rank{ctx.rank}"
    if isinstance(metadata.get(logs_key), TensorStorageMetadata):
        state[logs_key] = torch.empty(metadata[logs_key].size, dtype=torch.float64)
    for key, meta in metadata.items():  # optimizer state not created yet (SGD makes it lazily)
        if key.startswith("optim/") and key not in state:
            name, _ = key[len("optim/"):].rsplit("/", 1)
            if name in by_name and isinstance(meta, TensorStorageMetadata):
                state[key] = torch.empty(meta.size, dtype=meta.properties.dtype,
                                         device=by_name[name].device)
    missing = [k for k in state if k not in metadata]
    if missing:
        raise ValueError(f"checkpoint {path} lacks {missing[:3]}: it was saved by another "
                         f"model or layout (or another number of ranks).")
    with rec.untimed():
        dcp.load(state, storage_reader=reader)
    for key, value in state.items():
        if key.startswith("optim/"):
            name, k = key[len("optim/"):].rsplit("/", 1)
            optimizer.state[by_name[name]][k] = value
    torch.set_rng_state(state[f"rng/rank{ctx.rank}"])
    if logs is not None:
        logs[:] = [tuple(row) for row in state[logs_key].tolist()]
    return int(state["step"])


_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_SAFE_GLOBALS = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
                 ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
                 ("pathlib", "PureWindowsPath"), ("pathlib", "Path")}


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
    """`FileSystemReader` whose metadata is unpickled through `_MetadataUnpickler`."""

    def read_metadata(self, *args, **kwargs):
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            try:
                metadata = _MetadataUnpickler(f).load()
            except pickle.UnpicklingError as e:
                raise ValueError(f"{self.path}: {e}") from None
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
