"""`NodeLayout`: which node each rank runs on, so the mesh can keep tp inside a node.

A node is one machine: its GPUs talk over NVLink (hundreds of GB/s), while different nodes talk
over the network (InfiniBand, ~50 GB/s per GPU). Launchers start the same number of processes
on every node and number the ranks node by node — torchrun gives each process
`RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK` (GROUP_RANK is the node's index in the
rendezvous) — so with the mesh laid out `(pp, dp, tp)`, tp fastest-varying, a tp group of
`tp` consecutive ranks stays on one node whenever `tp` divides the ranks per node, and pp then
dp are the axes that cross nodes. That is Megatron-LM's and torchtitan's placement: tensor
parallelism exchanges activations in every layer and needs the fast link; a pipeline sends one
activation per micro-batch at a stage boundary; data parallelism one gradient all-reduce per step.

Where the layout comes from:

- `from_env`: a process under `torchrun` / `accelerate launch` (one or several nodes) reads
  `GROUP_RANK` (else `NODE_RANK`, `SLURM_NODEID`) and `LOCAL_WORLD_SIZE`; `launched.py`
  gathers every rank's node so the record names them.
- `uniform(world_size, ranks_per_node)`: an emulated run places its ranks `gpus_per_node` of
  the hardware profile to a node — the same rule the virtual clock and the cost model use to
  pick a link (`costmodel.comm.link_for_ranks`).
- one node: `mgpukit.launch` forks every worker on this machine.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Mapping

from mgpukit.costmodel.hardware import load_profile
from mgpukit.runtime.dims import ParallelDims


class NodeLayoutWarning(UserWarning):
    """A mesh axis that should stay inside a node crosses nodes (correct, but slow on GPUs)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeLayout:
    of_rank: tuple[int, ...]  # node index of each global rank
    hosts: tuple[str, ...] = ()  # host name of each node, where known

    @classmethod
    def uniform(cls, world_size: int, ranks_per_node: int) -> "NodeLayout":
        """Ranks filled node by node, `ranks_per_node` to a node (the last may hold fewer)."""
        if ranks_per_node < 1:
            raise ValueError(f"ranks_per_node must be >= 1, got {ranks_per_node}")
        return cls(of_rank=tuple(r // ranks_per_node for r in range(world_size)))

    @classmethod
    def single(cls, world_size: int) -> "NodeLayout":
        return cls(of_rank=(0,) * world_size)

    @property
    def count(self) -> int:
        return len(set(self.of_rank))

    @property
    def ranks_per_node(self) -> int:
        """The most ranks any node holds."""
        return max((self.of_rank.count(n) for n in set(self.of_rank)), default=0)

    def node_of(self, rank: int) -> int:
        return self.of_rank[rank]

    def spans(self, ranks: Iterable[int]) -> bool:
        """True when `ranks` (global) live on more than one node: their traffic uses the network."""
        return len({self.of_rank[r] for r in ranks}) > 1

    def crossing_axes(self, dims: ParallelDims) -> list[str]:
        """The mesh axes with at least one group spread over several nodes."""
        out = []
        for axis in ParallelDims.AXES:
            if getattr(dims, axis) == 1:
                continue
            groups = {tuple(dims.rank_of(**{**dims.coords(r), axis: i}) for i in range(getattr(dims, axis)))
                      for r in range(dims.world_size)}
            if any(self.spans(g) for g in groups):
                out.append(axis)
        return out

    def check(self, dims: ParallelDims) -> str | None:
        """A sentence when a tp group spans nodes (tp should divide the ranks per node), else None."""
        if "tp" not in self.crossing_axes(dims):
            return None
        k = self.ranks_per_node
        fix = (f"Use a tp that divides {k} (tp <= ranks per node)" if k > 1 else
               "With one rank per node only tp = 1 stays inside a node: use tp = 1")
        return (f"tp={dims.tp} puts tensor-parallel groups across nodes ({k} rank{'s' if k != 1 else ''} per node): tp "
                f"exchanges activations in every layer and should stay on one node's fast link. "
                f"{fix} and let pp or dp cross nodes.")

    def warn(self, dims: ParallelDims, *, stacklevel: int = 2) -> None:
        message = self.check(dims)
        if message:
            warnings.warn(message, NodeLayoutWarning, stacklevel=stacklevel + 1)

    def as_dict(self) -> dict:
        """What the record keeps: ``{"count", "ranks_per_node", "of_rank", "hosts"}``."""
        return {"count": self.count, "ranks_per_node": self.ranks_per_node,
                "of_rank": list(self.of_rank), "hosts": list(self.hosts)}


def node_rank_from_env(env: Mapping[str, str] | None = None) -> int:
    """This process's node index: torchrun's GROUP_RANK (accelerate launch runs torchrun), else
    NODE_RANK, else Slurm's SLURM_NODEID, else 0 (one machine)."""
    env = os.environ if env is None else env
    for key in ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"):
        if env.get(key, "").isdigit():
            return int(env[key])
    return 0


def from_env(world_size: int, env: Mapping[str, str] | None = None) -> NodeLayout:
    """The layout a launcher's environment implies without talking to the other ranks: every
    node holds LOCAL_WORLD_SIZE ranks, numbered node by node (torchrun's rule)."""
    env = os.environ if env is None else env
    local = int(env.get("LOCAL_WORLD_SIZE") or world_size)
    return NodeLayout.uniform(world_size, max(1, min(local, world_size)))


def for_profile(world_size: int, profile) -> NodeLayout:
    """An emulated run's layout: `profile.gpus_per_node` ranks to a node."""
    return NodeLayout.uniform(world_size, load_profile(profile).gpus_per_node)
