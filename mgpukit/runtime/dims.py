"""`ParallelDims`: how the world is cut into data, tensor and pipeline parallel groups.

`dp * tp * pp` must equal the number of workers. The mesh is laid out `(pp, dp, tp)` with tensor
parallel innermost, as Megatron-LM and torchtitan do: TP exchanges activations every layer, so
its ranks should be neighbours (the same NVLink island); PP only sends at stage boundaries.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParallelDims:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    world_size: int | None = None  # defaults to dp * tp * pp

    AXES = ("pp", "dp", "tp")

    def __post_init__(self):
        for name in ("dp", "tp", "pp"):
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

    def _hint(self) -> str:
        n = self.world_size
        if n % (self.tp * self.pp) == 0:
            return f" (e.g. dp={n // (self.tp * self.pp)} with tp={self.tp}, pp={self.pp})"
        return ""

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.pp, self.dp, self.tp)

    def coords(self, rank: int) -> dict[str, int]:
        """This rank's position on each axis: rank = (pp_rank * dp + dp_rank) * tp + tp_rank."""
        tp_rank = rank % self.tp
        dp_rank = (rank // self.tp) % self.dp
        pp_rank = rank // (self.tp * self.dp)
        return {"pp": pp_rank, "dp": dp_rank, "tp": tp_rank}

    def rank_of(self, *, pp: int = 0, dp: int = 0, tp: int = 0) -> int:
        """The global rank at these coordinates (the inverse of `coords`)."""
        return (pp * self.dp + dp) * self.tp + tp

    def build_mesh(self, device_type: str = "cpu"):
        """The `DeviceMesh` over the launched group, axes named ("pp", "dp", "tp").

        Made once per launch, in every worker, by the launcher (`WorkerContext.mesh`)."""
        # lazy: this module imports without torch (the parent, `mgpukit plan`)
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, self.shape, mesh_dim_names=self.AXES)

    def as_dict(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp}
