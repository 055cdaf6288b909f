"""The worker's view of its launch: rank, mode, device, and its place in the device mesh.

`launch` (and the exported scripts under `torchrun` / `accelerate launch`, and the reference
trained in-process) builds one `WorkerContext` per worker through `worker_context`, with the
mesh already made — `ParallelDims` -> `DeviceMesh` with the named axes ``("pp", "dp", "tp")``
— and, for a run, the `Layout` resolved before launch (`mgpukit.prepare`): the only carrier of
the layout into a worker. Library code asks the context for the axis it means instead of
talking to "the world", and reads the rest of the layout (schedule, v, micro-batches, sp,
dtype, checkpointing) from `ctx.layout`:

    ctx.group("dp")        # the process group of this rank's data-parallel replicas
    ctx.size("pp")         # pipeline degree (the mesh's: built from the layout's)
    ctx.layout.schedule    # the run's resolved layout (None in a plain `launch`)
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
import torch.distributed as dist

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
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
    dims: ParallelDims | None = None  # derived from `layout` (`ParallelDims.of_layout`); no layout: all data parallel
    mesh: Any = None  # torch DeviceMesh over the launched group, axes ("pp", "dp", "tp")
    nodes: NodeLayout | None = None  # None: every rank on one node (one machine)
    layout: Layout | None = None  # the run's resolved layout (`mgpukit.prepare`); None: a plain launch

    def __post_init__(self):
        if self.layout is not None:  # a run: the mesh's shape is its layout's degrees, derived here
            derived = ParallelDims.of_layout(self.layout)
            if self.dims is not None and self.dims != derived:
                raise ValueError(f"the mesh {self.dims.as_dict()} is not the layout's {derived.as_dict()}.")
            object.__setattr__(self, "dims", derived)
        elif self.dims is None:
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
    def emulates_gpu(self) -> bool:
        """Emulated ranks standing in for GPUs (a profile whose launches are asynchronous): their
        tensors live on the CPU (or are fake), but the program timed is the one a GPU would run."""
        return self.is_emulated and load_profile(self.profile).async_launch

    @property
    def coords(self) -> dict[str, int]:
        """This rank's index on each axis: ``{"pp": …, "dp": …, "tp": …}``."""
        return self.dims.coords(self.rank)

    def size(self, axis: str) -> int:
        return self.dims.size(axis)

    @property
    def batch_coords(self) -> tuple[int, int]:
        """(which slice, of how many) of the global batch this rank reads: the dp index, except
        that a context-parallel group reads one slice together (`ParallelDims.batch_coords`)."""
        return self.dims.batch_coords(self.rank)

    def group(self, axis: str):
        """The process group of `axis` this rank belongs to (None when there is no group:
        a single process, where collectives are never called). "cp", "ep" and "dp_outer"
        exist when cp or ep > 1 (cut inside dp: `runtime.dims`)."""
        if self.mesh is None:
            return None
        return self.mesh.get_group(axis)

    def with_layout(self, layout: Layout) -> "WorkerContext":
        """This context for another run on the same mesh (`experiment.run_each`: several runs,
        one launch); the run's degrees must be the mesh's."""
        if ParallelDims.of_layout(layout) != self.dims:
            raise ValueError(f"a layout of {ParallelDims.of_layout(layout).as_dict()} cannot run on "
                             f"this launch's mesh {self.dims.as_dict()}.")
        return dataclasses.replace(self, layout=layout)

    def axis_ranks(self, axis: str) -> list[int]:
        """Global ranks along `axis` through this rank, in axis order (pp: stage order)."""
        if axis in ("cp", "ep", "dp_outer"):
            return self.dims.sub_axis_ranks(self.rank, axis)
        c = self.coords
        return [self.dims.rank_of(**{**c, axis: i}) for i in range(self.size(axis))]


def worker_context(*, rank: int, world_size: int, mode: str, device: torch.device, t0: float,
                   threads: int, dims: ParallelDims | None = None, layout: Layout | None = None,
                   profile=None, options: dict | None = None, nodes: NodeLayout | None = None,
                   mesh: bool = True) -> WorkerContext:
    """The one way a worker's context is made: `launch`'s workers, a process of an exported
    script, the reference trained in-process. `mesh=True` builds the `DeviceMesh` of `dims`
    (a collective: every rank of the group calls it; none in a single process)."""
    dims = dims or (ParallelDims.of_layout(layout) if layout is not None else ParallelDims(dp=world_size))
    return WorkerContext(rank=rank, world_size=world_size, mode=mode, profile=profile, device=device,
                         t0=t0, threads=threads, options=dict(options or {}), dims=dims,
                         mesh=build_mesh(dims, device) if mesh else None, nodes=nodes, layout=layout)


def build_mesh(dims: ParallelDims, device: torch.device):
    """The launch's `DeviceMesh` (once per worker; a collective call: every rank makes it)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    return dims.build_mesh(device.type)


_current: WorkerContext | None = None


def set_current(ctx: WorkerContext | None) -> None:
    global _current
    _current = ctx


def current() -> WorkerContext:
    """The context of the launch this process is a worker of (raises outside a launch)."""
    if _current is None:
        raise RuntimeError("mgpukit.current() is only available inside a function run by mgpukit.launch().")
    return _current
