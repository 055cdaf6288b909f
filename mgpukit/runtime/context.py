"""The worker's view of its launch: rank, mode, device, and its place in the device mesh.

`launch` (and the exported scripts under `torchrun` / `accelerate launch`) builds one
`WorkerContext` per worker with the mesh already made — `ParallelDims` -> `DeviceMesh` with the
named axes ``("pp", "dp", "tp")`` — so library code asks the context for the axis it means
instead of talking to "the world":

    ctx.group("dp")        # the process group of this rank's data-parallel replicas
    ctx.size("pp")         # pipeline degree
    ctx.coords["dp"]       # this rank's data-parallel index (which slice of the batch)
    ctx.axis_ranks("pp")   # global ranks of this rank's pipeline, stage order
    ctx.node               # the node (machine) this rank runs on; ctx.nodes: every rank's
    ctx.spans_nodes(ranks) # True when a group of global ranks crosses nodes (the network)

`current()` exists for code written in a notebook cell, which is launched as a plain function
and has no other way to ask "which rank am I, in which mode?".
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.nodes import NodeLayout


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerContext:
    rank: int
    world_size: int
    mode: str  # "cpu" | "gpu" | "emulated"
    profile: Any  # hardware profile (name or HardwareProfile) in emulated mode, else None
    device: torch.device
    t0: float  # parent's time.perf_counter() at launch; measured timelines count from here
    threads: int
    options: dict = dataclasses.field(default_factory=dict)
    dims: ParallelDims | None = None  # None: every rank a data-parallel replica
    mesh: Any = None  # torch DeviceMesh over the launched group, axes ("pp", "dp", "tp")
    nodes: NodeLayout | None = None  # None: every rank on one node (one machine)

    def __post_init__(self):
        if self.dims is None:
            object.__setattr__(self, "dims", ParallelDims(dp=self.world_size))
        if self.nodes is None:
            object.__setattr__(self, "nodes", NodeLayout.single(self.world_size))

    @property
    def node(self) -> int:
        """The index of the node this rank runs on (0 on one machine)."""
        return self.nodes.node_of(self.rank)

    def spans_nodes(self, ranks) -> bool:
        """Whether a group of global `ranks` crosses nodes: its traffic takes the network."""
        return self.nodes.spans(ranks)

    @property
    def is_emulated(self) -> bool:
        return self.mode == "emulated"

    @property
    def coords(self) -> dict[str, int]:
        """This rank's index on each axis: ``{"pp": …, "dp": …, "tp": …}``."""
        return self.dims.coords(self.rank)

    def size(self, axis: str) -> int:
        return getattr(self.dims, axis)

    def group(self, axis: str):
        """The process group of `axis` this rank belongs to (None when there is no group:
        a single process, where collectives are never called)."""
        if self.mesh is None:
            return None
        return self.mesh.get_group(axis)

    def axis_ranks(self, axis: str) -> list[int]:
        """Global ranks along `axis` through this rank, in axis order (pp: stage order)."""
        c = self.coords
        return [self.dims.rank_of(**{**c, axis: i}) for i in range(self.size(axis))]


_current: WorkerContext | None = None


def set_current(ctx: WorkerContext | None) -> None:
    global _current
    _current = ctx


def current() -> WorkerContext:
    """The context of the launch this process is a worker of (raises outside a launch)."""
    if _current is None:
        raise RuntimeError("mgpukit.current() is only available inside a function run by mgpukit.launch().")
    return _current
