"""Checkpoint and resume with `torch.distributed.checkpoint` (DCP), through the trainer's seam.

A checkpoint is what a run needs to go on as if it had never stopped: the weights, the
optimizer's state (SGD's momentum, Adam's moments and step), the next step to run, each rank's
RNG state and its share of the logged losses. The data position needs nothing more: a batch
depends only on (seed, step, data rank) and the global batch is the same whatever the number
of workers, so the step *is* the position (`step × global_batch` samples consumed) — and a run
resumed on another number of workers reads the same samples from there on.

Every rank saves its own share in one collective call (`dcp.save`), under the names of the
unsplit model (`model/blocks.2.attn.q_proj.weight`,
`optim/blocks.2.attn.q_proj.weight/momentum_buffer`) and in its full shape: the files describe
the model, not the layout that wrote them, so any layout can load them (*resharding*: a
checkpoint written by zero3 on 4 workers loads into zero3 or ddp on 2, or into one process,
`load_full`). What a rank holds of a tensor it saves as *chunks* — boxes of the full tensor at
an offset — and DCP writes every chunk once and reads, for each box a rank asks for, the
overlapping pieces of whatever boxes were written:

    ddp, pipelines      whole tensors (replicas are written once, by one rank)
    fsdp2, tp-native    DTensors: DCP knows their shards (Shard(0) on dp; the tp splits)
    tp (ours)           one box per split parameter: offset rank·n along its split dim
    zero1/2/3 (ours)    this rank's flat shard of each unit cut along the parameters it
                        spans: a range of a parameter's flattened elements is at most a
                        partial row, full rows and a partial row (`boxes`), each a box; the
                        optimizer's state over the shard is cut the same way; padding is not
                        saved (zero on load, as it is in training)

Which of these a rank holds is declared by the applier that cut the model (`Parts.holding`,
`training/holding.py`: replicated, tp-split or sharded); nothing here guesses it.

Loading is `dcp.load` into this rank's tensors, in place (the dp-bucketed strategy's gradients
are views into its buckets; the parameters stay the same objects; ZeRO-1/2 then all-gather
their shards into the full parameters).

The logged losses: each rank keeps its `contribution` per step (summed over the world they are
the global loss and squared gradient norm). Resumed on as many ranks, each loads its own, and
the record is bitwise the uninterrupted one's; resumed on another number, rank 0 takes the sum
of the old ranks' contributions (in rank order) and the others 0. The RNG states load on as
many ranks; on another number each rank keeps its seeded state (the shipped models draw no
random numbers while training: no dropout).

Saving is atomic: the files go to ``<dir>/step-K.partial``, which is renamed to ``step-K``
once every rank has written and rank 0 has checksummed them into its manifest, and only then
does ``<dir>/latest`` (written atomically) point to it. A crash while saving leaves the previous
checkpoint, and `latest`, as they were; a save that fails (a full disk) removes its partial
folder and says so in one line. How a folder of checkpoints is kept — checksums, one run at a
time, the newest K, the checks made before a resume launches — is `checkpoint_files.py`.

Loading treats the checkpoint as data, never code (`checkpoint_data.py`): its ``.metadata`` is
unpickled through an allow-list and checked before DCP plans a read — tensors only, stored in
the files its manifest lists — and the load planner here refuses pickled bytes outright.

Reference: PyTorch Distributed Checkpoint (torch.distributed.checkpoint), and torchtitan's
checkpointing, which saves the same pieces through it; the flat-shard-to-parameter map is what
DeepSpeed's universal checkpoint computes to reshard ZeRO's partitions.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import warnings
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

from mgpukit.files import write_text
from mgpukit.training.checkpoint_data import SafeReader
from mgpukit.training.checkpoint_files import (DEFAULT_KEEP, LATEST, CheckpointError, check_inside,  # noqa: F401
                                               has_checkpoint, latest, prune, remove_partials, verify,
                                               write_failure, write_manifest)
from mgpukit.training.holding import Piece
from mgpukit.training.trainer import Checkpointing


def checkpointing(ctx, rec, cfg, parts, optimizer) -> Checkpointing | None:
    """The trainer's `Checkpointing` from the run's options (`checkpoint_dir`,
    `checkpoint_every`, `resume`); None when the run asked for none."""
    root = cfg.options.get("checkpoint_dir")
    if not root:
        if cfg.options.get("resume"):
            raise ValueError("resume=true needs checkpoint_dir=... to resume from.")
        return None
    check_inside(root)  # in every rank: a script under torchrun has had no pre-launch check
    every = cfg.options.get("checkpoint_every") or 0
    keep = cfg.options.get("keep_checkpoints") or DEFAULT_KEEP
    info = {"model": cfg.model, "optimizer": cfg.optimizer, "world_size": ctx.world_size,
            "global_batch": cfg.global_batch, "seed": cfg.seed,  # with "step": its manifest
            "model_config": dataclasses.asdict(cfg.model_config())}
    ck = Checkpointing()
    if cfg.options.get("resume"):
        ck.start_step = load_checkpoint(root, ctx, rec, parts, optimizer, logs=ck.logs)

    def on_step_end(step: int) -> None:
        if (every and (step + 1) % every == 0) or step + 1 == cfg.steps:
            save_checkpoint(root, step + 1, ctx, rec, parts, optimizer, logs=ck.logs, info=info, keep=keep)
    ck.on_step_end = on_step_end
    return ck


def placements(parts) -> list[tuple[torch.Tensor, list[Piece]]]:
    """For each tensor the optimizer steps: the pieces of the full model it holds, as the
    applier that cut the model declared them (`Parts.holding`, `training.holding`)."""
    return parts.holding.placements(parts.module, parts.params, trainer_of=type(parts.sync).__name__)


class Chunks:
    """Boxes of one full tensor held by this rank, in the form DCP saves and loads (its
    `_Checkpointable` protocol, which DTensor implements the same way)."""

    def __init__(self, size, views: list[tuple[tuple, torch.Tensor]]):
        self._size, self.views = torch.Size(size), views

    def size(self) -> torch.Size:
        return self._size

    def __create_write_items__(self, fqn, obj):
        return [WriteItem(index=MetadataIndex(fqn, torch.Size(o)), type=WriteItemType.SHARD,
                          tensor_data=TensorWriteData(
                              chunk=ChunkStorageMetadata(offsets=torch.Size(o), sizes=t.size()),
                              properties=TensorProperties.create_from_tensor(t), size=self._size))
                for o, t in self.views]

    def __create_chunk_list__(self):
        return [ChunkStorageMetadata(offsets=torch.Size(o), sizes=t.size()) for o, t in self.views]

    def __get_tensor_shard__(self, index):
        for o, t in self.views:
            if torch.Size(o) == index.offset:
                return t
        raise ValueError(f"{index.fqn}: no chunk at offset {index.offset} on this rank")


class _SavePlanner(dcp.DefaultSavePlanner):
    """DCP's planner, which looks a chunk up only inside a `torch.Tensor`: `Chunks` too."""

    def lookup_object(self, index):
        obj = self.state_dict.get(index.fqn)
        return obj.__get_tensor_shard__(index) if isinstance(obj, Chunks) else super().lookup_object(index)


class _LoadPlanner(dcp.DefaultLoadPlanner):
    """DCP's planner, keeping `Chunks` (its set-up replaces objects it does not know by None)
    and looking chunks up in them; reading only tensors of the shape asked for (what it plans
    is checked before anything is read) and never unpickling bytes (`checkpoint_data`)."""

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        chunks = {k: v for k, v in state_dict.items() if isinstance(v, Chunks)}
        super().set_up_planner(state_dict, metadata, is_coordinator)  # sets unknown types to None
        state_dict.update(chunks)
        self.state_dict.update(chunks)

    def lookup_tensor(self, index):
        obj = self.state_dict.get(index.fqn)
        return obj.__get_tensor_shard__(index) if isinstance(obj, Chunks) else super().lookup_tensor(index)

    def create_local_plan(self):
        for key, obj in self.state_dict.items():
            meta = self.metadata.state_dict_metadata.get(key)
            if not isinstance(meta, TensorStorageMetadata) or meta.size != obj.size():
                raise CheckpointError(
                    f"checkpoint entry {key!r} is {_described(meta)} where this run loads a tensor of shape "
                    f"{tuple(obj.size())}: refusing to read it (another model's, or crafted).")
        return super().create_local_plan()

    def load_bytes(self, read_item, value):  # DCP's would torch.load(weights_only=False) them
        raise CheckpointError(f"checkpoint entry {read_item.dest_index.fqn!r} is pickled bytes, which the kit "
                              f"never saves and never unpickles (they could run code): refusing it.")


def _described(meta) -> str:
    if meta is None:
        return "missing"
    if isinstance(meta, TensorStorageMetadata):
        return f"a tensor of shape {tuple(meta.size)}"
    return f"a {type(meta).__name__}"


def _dcp_load(state: dict, reader, **kw) -> None:
    """`dcp.load` through `_LoadPlanner`, with a refusal raised as itself: DCP wraps what a
    planner raises in its `CheckpointException` (per rank, with the traceback)."""
    try:
        dcp.load(state, storage_reader=reader, planner=_LoadPlanner(), **kw)
    except CheckpointException as e:
        for failure in (e.failures or {}).values():  # rank -> (exception, its traceback)
            failure = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(failure, CheckpointError):
                raise failure from None
        raise


def _put(state: dict, key: str, pieces: list[Piece], tensor: torch.Tensor) -> None:
    """`tensor` (shaped like the rank's parameter) under `key` + each piece's name."""
    for piece in pieces:
        k = key.format(piece.name)
        if piece.offsets is None:
            state[k] = tensor
            continue
        chunks = state.setdefault(k, Chunks(piece.size, []))
        chunks.views.append((piece.offsets, piece.view(tensor)))


def _state(ctx, parts, optimizer, next_step: int, logs) -> dict:
    state = {"step": torch.tensor(next_step, dtype=torch.int64),
             # this rank's share of what was logged so far: the resumed record covers the run
             f"logs/rank{ctx.rank}": torch.tensor(logs, dtype=torch.float64).reshape(-1, 2),
             f"rng/rank{ctx.rank}": torch.get_rng_state()}
    for p, pieces in placements(parts):
        _put(state, "model/{}", pieces, p.detach())
        for key, value in optimizer.state.get(p, {}).items():
            if value.shape == p.shape:  # elementwise state: cut like the parameter
                _put(state, f"optim/{{}}/{key}", pieces, value)
            else:  # a scalar (Adam's step): the same for every piece
                for piece in pieces:
                    state[f"optim/{piece.name}/{key}"] = value
    return state


def save_checkpoint(root, next_step: int, ctx, rec, parts, optimizer, *, logs=(), info=None,
                    keep: int = DEFAULT_KEEP) -> Path:
    """Save every rank's share as ``<root>/step-<next_step>`` (collective: every rank calls it),
    with its manifest (`info` + the step + each file's checksum); keep the newest `keep`."""
    root = Path(root)
    final = root / f"step-{next_step:06d}"
    partial = root / f"step-{next_step:06d}.partial"
    with rec.untimed():
        if ctx.rank == 0:
            remove_partials(root)  # a save that crashed earlier (this run holds the folder's lock)
        _barrier()
        try:  # DCP gathers every rank's write result: a failure raises on every rank
            dcp.save(_state(ctx, parts, optimizer, next_step, list(logs)), checkpoint_id=str(partial),
                     planner=_SavePlanner())
        except (Exception, CheckpointException) as e:  # DCP's is a BaseException
            if ctx.rank == 0:
                shutil.rmtree(partial, ignore_errors=True)
            raise write_failure(final, root, e) from None
        _barrier()
        if ctx.rank == 0:
            try:
                write_manifest(partial, {**(info or {}), "step": next_step})
                if final.exists():  # an older save of the same step, e.g. a run resumed twice
                    shutil.rmtree(final)
                os.replace(partial, final)
                write_text(root / LATEST, final.name + "\n", what="checkpoint pointer")
            except OSError as e:
                shutil.rmtree(partial, ignore_errors=True)
                raise write_failure(final, root, e) from None
            prune(root, keep, final.name)
        _barrier()
    return final


def load_checkpoint(root, ctx, rec, parts, optimizer, *, logs: list | None = None) -> int:
    """Load the latest checkpoint under `root` into this rank's parts and optimizer, in place
    (and this rank's logged steps into `logs`); return the step to start from (collective).
    The checkpoint may come from another layout or number of ranks (module docstring). Its
    checksums are verified here unless the launching process did it already (`mgpukit.run`
    checks before launch and says so in the launch's options; a `torchrun` script does not)."""
    path = latest(root)
    if not ctx.options.get("checkpoint_verified"):
        verify(path)
    reader = SafeReader(str(path))
    metadata = reader.read_metadata().state_dict_metadata
    saved_optim = defaultdict(dict)  # name -> {state key: its metadata}
    for key, meta in metadata.items():
        if key.startswith("optim/") and isinstance(meta, TensorStorageMetadata):
            name, k = key[len("optim/"):].rsplit("/", 1)
            saved_optim[name][k] = meta
    state = {"step": torch.tensor(0, dtype=torch.int64)}
    optim_state = {}  # parameter -> {key: the tensor loaded into}
    for p, pieces in placements(parts):
        _put(state, "model/{}", pieces, p.detach())
        held = dict(optimizer.state.get(p, {}))
        for k in sorted({k for piece in pieces for k in saved_optim.get(piece.name, {})}):
            pc = next(pc for pc in pieces if k in saved_optim.get(pc.name, {}))
            meta = saved_optim[pc.name][k]
            elementwise = tuple(meta.size) == pc.size
            if k not in held:  # not created yet: SGD and Adam make their state at the first step
                held[k] = (torch.zeros_like(p.detach()) if elementwise else
                           torch.empty(meta.size, dtype=meta.properties.dtype))
            if elementwise:
                _put(state, f"optim/{{}}/{k}", pieces, held[k])
            else:
                names = list(dict.fromkeys(pc.name for pc in pieces))  # a name can have 3 boxes
                for i, name in enumerate(names):  # every piece saved the same scalar
                    state[f"optim/{name}/{k}"] = held[k] if i == 0 else held[k].clone()
        optim_state[p] = held
    old_ranks = sorted(int(k.rsplit("rank", 1)[1]) for k in metadata if k.startswith("logs/rank"))
    same_world = len(old_ranks) == ctx.world_size
    if same_world:
        state[f"logs/rank{ctx.rank}"] = torch.empty(metadata[f"logs/rank{ctx.rank}"].size, dtype=torch.float64)
        state[f"rng/rank{ctx.rank}"] = torch.empty(metadata[f"rng/rank{ctx.rank}"].size, dtype=torch.uint8)
    elif ctx.rank == 0:
        for r in old_ranks:
            state[f"logs/rank{r}"] = torch.empty(metadata[f"logs/rank{r}"].size, dtype=torch.float64)
    missing = [k for k in state if k not in metadata]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {missing[:3]}: it was saved by another "
                              f"model (or one whose layers do not split like this layout's).")
    with rec.untimed():
        _dcp_load(state, reader)
    for p, held in optim_state.items():
        if held:
            optimizer.state[p] = held
    if same_world:
        torch.set_rng_state(state[f"rng/rank{ctx.rank}"])
    if logs is not None:
        if same_world:
            rows = state[f"logs/rank{ctx.rank}"]
        else:  # another number of ranks: rank 0 carries the old world's sum, in rank order
            steps = int(state["step"])
            rows = torch.zeros(steps, 2, dtype=torch.float64)
            if ctx.rank == 0:
                for r in old_ranks:
                    rows = rows + state[f"logs/rank{r}"]
        logs[:] = [tuple(row) for row in rows.tolist()]
    if parts.holding.after_load is not None:  # ZeRO: the full parameters from the loaded shards
        with rec.untimed():
            parts.holding.after_load()
    return int(state["step"])


def find_checkpoint(path) -> Path:
    """`path` itself when it is one checkpoint (holds ``.metadata``), else its `latest`."""
    path = Path(path)
    return path if (path / ".metadata").is_file() else latest(path)


def load_full(path) -> dict:
    """A checkpoint as full tensors in this one process, whatever layout and number of ranks
    wrote it: ``{"step", "model": {name: tensor}, "optim": {name: {key: tensor}}}``. `path`:
    a checkpoint folder or the `checkpoint_dir` holding `latest`. Its files are checked against
    their checksums first (`checkpoint_files.verify`)."""
    folder = find_checkpoint(path)
    verify(folder)
    reader = SafeReader(str(folder))
    metadata = reader.read_metadata().state_dict_metadata
    state = {"step": torch.tensor(0, dtype=torch.int64)}
    for key, meta in metadata.items():
        if key.startswith(("model/", "optim/")) and isinstance(meta, TensorStorageMetadata):
            state[key] = torch.empty(meta.size, dtype=meta.properties.dtype)
    with warnings.catch_warnings():  # "torch.distributed is ... uninitialized": that is the point
        warnings.simplefilter("ignore", UserWarning)
        _dcp_load(state, reader, no_dist=True)
    out = {"step": int(state["step"]), "model": {}, "optim": defaultdict(dict)}
    for key, value in state.items():
        if key.startswith("model/"):
            out["model"][key[len("model/"):]] = value
        elif key.startswith("optim/"):
            name, k = key[len("optim/"):].rsplit("/", 1)
            out["optim"][name][k] = value
    out["optim"] = dict(out["optim"])
    return out


def load_into(path, model: torch.nn.Module, optimizer=None) -> int:
    """Load a checkpoint (any layout, any number of ranks) into a single-process `model` and
    its `optimizer`; return the step to go on from."""
    full = load_full(path)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(full["model"][name])
            if optimizer is not None and name in full["optim"]:
                optimizer.state[p] = dict(full["optim"][name])
    return full["step"]


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
