"""What the cost model predicts for a sharded run: model-state bytes per rank and bytes sent.

The formulas live in `mgpukit.costmodel` (one home, no torch): `memory.model_state_bytes` is
ZeRO's table (Rajbhandari et al. 2020, §5 and Figure 1; fp32 here: ``4Ψ + 4Ψ + 4KΨ`` with K
optimizer-state tensors per parameter, sharded N-fold from stage 1, 2 or 3 on), and
`volume.dp_collective_bytes` its communication (§7.2: stages 1-2 ``2(n-1)/n·Ψ`` like DDP's
all-reduce, stage 3 ``3(n-1)/n·Ψ``, 1.5×). This module only fills them in for a run.
"""
from __future__ import annotations

from mgpukit.costmodel.comm import bus_factor
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import model_state_bytes
from mgpukit.costmodel.volume import dp_collective_bytes
from mgpukit.training.building import count_params


def optimizer_states(optimizer: str) -> int:
    """fp32 tensors the kit's optimizer keeps per parameter: AdamW m and v; SGD its momentum."""
    return 2 if optimizer == "adamw" else 1


def predicted_model_states(n_params: int, *, dp: int, zero: int, optimizer: str = "adamw",
                           micro_batches: int = 1) -> dict:
    """Bytes per rank of params, grads and optimizer states (fp32), and bytes each rank sends
    per step over the dp group (ring "bus bytes", as the recorder counts them)."""
    layout = Layout(dp=dp, zero=zero, dtype="fp32", num_micro_batches=micro_batches)
    memory = model_state_bytes(n_params, layout, optimizer_states=optimizer_states(optimizer))
    sent = sum(count * bus_factor(kind, dp) * nbytes
               for kind, (count, nbytes) in dp_collective_bytes(n_params, layout).items())
    return {"memory": memory, "comm_bytes": sent}


def zero_layout(stage: int):
    """A strategy's default layout: all workers data-parallel, ZeRO `stage`, fp32."""
    return lambda n: Layout(dp=n, zero=stage, dtype="fp32")


def zero_theory(stage: int):
    """The strategy's `theory(cfg, dims)`: predicted memory and bytes sent per step."""
    def theory(cfg, dims) -> dict:
        n_params = count_params(cfg)  # on the meta device: no weights allocated
        m = cfg.layout.num_micro_batches if dims.pp == 1 else 1
        out = predicted_model_states(n_params // dims.pp, dp=dims.dp, zero=stage,
                                     optimizer=cfg.optimizer, micro_batches=m)
        return {"params": n_params, **out}
    return theory
