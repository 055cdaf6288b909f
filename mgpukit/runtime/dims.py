"""`ParallelDims`: how the world is cut into data, tensor and pipeline parallel groups.

`dp * tp * pp` must equal the number of workers. The mesh is laid out `(pp, dp, tp)` with tensor
parallel innermost, as Megatron-LM and torchtitan do: TP exchanges activations every layer, so
its ranks should be neighbours (the same NVLink island); PP only sends at stage boundaries.

Context parallelism (`cp`) and expert parallelism (`ep`) are cut *inside* the dp axis: `dp`
counts every rank that averages the dense weights' gradients, and consecutive blocks of `cp`
(or `ep`) of them form a cp (ep) group. torchtitan does the same (its gradient reduction runs
over the flattened `dp_shard_cp` mesh; its experts borrow their ranks from dp), and
DeepSpeed-MoE places experts the same way: an ep group is `ep` consecutive data ranks, the
copies of one expert sit `ep` ranks apart (the `dp_outer` axis). The mesh is then
`(pp, dp_outer, cp | ep, tp)` with `dp = dp_outer × (cp | ep)` flattened back into "dp", so
every gradient sync written for "dp" runs over the right ranks unchanged. What differs is the
data: the `cp` ranks of a replica read the same sequences (`batch_coords`).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParallelDims:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1  # context parallel: blocks of cp consecutive dp ranks split each sequence
    ep: int = 1  # expert parallel: blocks of ep consecutive dp ranks split the experts
    world_size: int | None = None  # defaults to dp * tp * pp

    AXES = ("pp", "dp", "tp")

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        product = self.dp * self.tp * self.pp
        if self.world_size is None:
            object.__setattr__(self, "world_size", product)
        elif product != self.world_size:
            raise ValueError(
                f"dp*tp*pp = {self.dp}*{self.tp}*{self.pp} = {product}, but there are "
                f"{self.world_size} workers. Choose degrees whose product is {self.world_size}"
                f"{self._hint()}, or launch {product} workers."
            )
        if self.cp > 1 and self.ep > 1:
            raise ValueError(f"cp={self.cp} with ep={self.ep}: context and expert parallelism do not "
                             f"combine here yet; use one of them.")
        inner = self.cp * self.ep
        if self.dp % inner:
            raise ValueError(f"{'cp' if self.cp > 1 else 'ep'}={inner} must divide the data-parallel "
                             f"ranks dp={self.dp} (its groups are cut inside dp).")

    def _hint(self) -> str:
        n = self.world_size
        if n % (self.tp * self.pp) == 0:
            return f" (e.g. dp={n // (self.tp * self.pp)} with tp={self.tp}, pp={self.pp})"
        return ""

    @classmethod
    def of_layout(cls, layout) -> "ParallelDims":
        """The mesh of a resolved `costmodel.Layout` (whose world is dp × cp × ep × tp × pp):
        cp and ep are cut inside the mesh's dp axis (module docstring)."""
        return cls(dp=layout.dp * layout.cp * layout.ep, tp=layout.tp, pp=layout.pp, cp=layout.cp, ep=layout.ep)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.pp, self.dp, self.tp)

    def coords(self, rank: int) -> dict[str, int]:
        """This rank's position on each axis: rank = (pp_rank * dp + dp_rank) * tp + tp_rank."""
        tp_rank = rank % self.tp
        dp_rank = (rank // self.tp) % self.dp
        pp_rank = rank // (self.tp * self.dp)
        out = {"pp": pp_rank, "dp": dp_rank, "tp": tp_rank}
        inner = self.cp * self.ep
        if inner > 1:  # the sub-axes cut inside dp (module docstring)
            out.update(cp=dp_rank % self.cp, ep=dp_rank % self.ep, dp_outer=dp_rank // inner)
        return out

    def size(self, axis: str) -> int:
        """The degree of `axis`: "pp", "dp", "tp", "cp", "ep", or "dp_outer" (dp / (cp·ep))."""
        if axis == "dp_outer":
            return self.dp // (self.cp * self.ep)
        return getattr(self, axis)

    def batch_coords(self, rank: int) -> tuple[int, int]:
        """(which slice, of how many) of the global batch `rank` reads: its dp index, except that
        the cp ranks of one replica read the same sequences (each then keeps its own tokens)."""
        return self.coords(rank)["dp"] // self.cp, self.dp // self.cp

    def rank_of(self, *, pp: int = 0, dp: int = 0, tp: int = 0, **_sub) -> int:
        """The global rank at these coordinates (the inverse of `coords`; cp, ep and dp_outer
        are parts of `dp` and add nothing)."""
        return (pp * self.dp + dp) * self.tp + tp

    def sub_axis_ranks(self, rank: int, axis: str) -> list[int]:
        """Global ranks of `rank`'s group on a sub-axis of dp ("cp", "ep": consecutive dp
        indices; "dp_outer": every (cp·ep)-th), in axis order."""
        c = self.coords(rank)
        inner = self.cp * self.ep
        if axis in ("cp", "ep"):
            first = c["dp"] - c["dp"] % inner
            dps = [first + i for i in range(self.size(axis))]
        elif axis == "dp_outer":
            dps = [c["dp"] % inner + i * inner for i in range(self.size(axis))]
        else:
            raise ValueError(f"{axis!r} is not a sub-axis of dp; use cp, ep or dp_outer.")
        return [self.rank_of(pp=c["pp"], dp=d, tp=c["tp"]) for d in dps]

    def build_mesh(self, device_type: str = "cpu"):
        """The `DeviceMesh` over the launched group, axes named ("pp", "dp", "tp").

        Made once per launch, in every worker, by the launcher (`WorkerContext.mesh`)."""
        # lazy: this module imports without torch (the parent, `mgpukit plan`)
        from torch.distributed.device_mesh import init_device_mesh

        inner = self.cp * self.ep
        if inner == 1:
            return init_device_mesh(device_type, self.shape, mesh_dim_names=self.AXES)
        sub = "cp" if self.cp > 1 else "ep"
        mesh = init_device_mesh(device_type, (self.pp, self.dp // inner, inner, self.tp),
                                mesh_dim_names=("pp", "dp_outer", sub, "tp"))
        mesh["dp_outer", sub]._flatten("dp")  # the gradient syncs' "dp": every data rank
        return mesh

    def as_dict(self) -> dict[str, int]:
        out = {"dp": self.dp, "tp": self.tp, "pp": self.pp}
        out.update({k: getattr(self, k) for k in ("cp", "ep") if getattr(self, k) > 1})
        return out
