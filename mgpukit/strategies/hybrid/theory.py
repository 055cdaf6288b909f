"""What the cost model predicts for a hybrid run, per pipeline stage: bytes each rank sends on
each axis, the collectives it issues, its parameters, and the schedule's bubble.

Every figure comes from `mgpukit.costmodel` (one home for each formula): the tensor-parallel
table (`tensor_parallel.tp_collectives`, per stage), the data-parallel volume
(`volume.dp_collective_bytes` of the stage's tp-split parameters, `memory.stage_params`), the
pipeline's boundary tensor (``b·s·h``, as `volume.comm_bytes_per_step` charges it) and the
bubble (`pipeline.bubble_fraction`, the simulator through `strategies.pipeline.plan`). The
record carries them as ``theory``; `mgpukit.lessons.hybrid` puts them beside the measured
``comm[rank]["by_axis"]``. The step time needs a hardware profile: `predicted_step`.
"""
from __future__ import annotations

import dataclasses

from mgpukit.config import RunConfig
from mgpukit.costmodel import get_shape, load_profile, step_time
from mgpukit.costmodel.comm import bus_factor
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import stage_params
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.tensor_parallel import tp_collectives
from mgpukit.costmodel.volume import dp_collective_bytes
from mgpukit.strategies.pipeline.plan import PipelinePlan, theory_for


def boundary_messages(layout: Layout, stage: int) -> int:
    """Boundary tensors one rank of pipeline rank ``stage`` sends per micro-batch: an activation
    to the next stage and a gradient to the previous one, for each of its ``v`` chunks."""
    chunks = [stage + k * layout.pp for k in range(layout.v)]
    last = layout.pp * layout.v - 1
    return sum(int(c < last) + int(c > 0) for c in chunks)


def stage_theory(shape: ModelShape, layout: Layout, stage: int) -> dict:
    """Predicted figures of one rank of pipeline rank ``stage`` (any of its dp × tp ranks)."""
    t, d = layout.tp, layout.dp
    tp_items = tp_collectives(shape, layout, stage=stage) if t > 1 else {}
    tp_bytes = sum(c * bus_factor(k, t) * n for k, items in tp_items.items() for c, n in items)
    act = layout.micro_batch * shape.seq_len * shape.d_model * layout.dtype_bytes  # (b, s, h)
    if layout.sp:  # each tp rank sends its own sequence slice (b, s/t, h)
        act /= t
    pp_bytes = layout.num_micro_batches * boundary_messages(layout, stage) * act if layout.pp > 1 else 0.0
    psi = stage_params(shape, layout, stage)
    # gradients stay fp32 (the master weights' dtype) whatever the compute dtype
    dp_items = dp_collective_bytes(psi, dataclasses.replace(layout, dtype="fp32")) if d > 1 else {}
    dp_bytes = sum(c * bus_factor(k, d) * n for k, (c, n) in dp_items.items())
    counts = {"tp": {k: sum(c for c, _ in items) for k, items in tp_items.items()},
              "dp": {k: c for k, (c, _) in dp_items.items()},
              "pp": {"send": layout.num_micro_batches * boundary_messages(layout, stage)} if layout.pp > 1 else {}}
    return {"stage": stage, "params": psi,
            "bytes_sent": {"tp": tp_bytes, "pp": pp_bytes, "dp": dp_bytes,
                           "total": tp_bytes + pp_bytes + dp_bytes},
            "collectives": counts}


def hybrid_theory(cfg, dims) -> dict:
    """The registry's `theory(cfg, dims)`: per stage (above), and the schedule's bubble."""
    layout = cfg.layout
    shape = ModelShape.from_gpt_config(cfg.model_config())
    out = {"layout": layout.describe(), "stages": [stage_theory(shape, layout, s) for s in range(layout.pp)],
           "per": "one rank of each pipeline stage, per step (bytes: ring bytes sent)"}
    if layout.pp > 1:
        out["pipeline"] = theory_for(PipelinePlan(schedule=layout.schedule, p=layout.pp,
                                                  m=layout.num_micro_batches, v=layout.v))
        out["bubble_fraction"] = out["pipeline"]["bubble_fraction"]
    return out


def predicted_step(model: str | ModelShape, layout: Layout, profile) -> dict:
    """The cost model's step time of `layout` on `profile` (`costmodel.step_time`): compute,
    exposed communication per axis, bubble. The dp sync runs after the whole schedule here, not
    overlapped with backward, so it is charged whole (``overlap_dp=False``)."""
    hw = load_profile(profile) if isinstance(profile, str) else profile
    if isinstance(model, str):
        try:
            shape = ModelShape.from_gpt_config(RunConfig(model=model).model_config())
        except ValueError:
            shape = get_shape(model)
    else:
        shape = model
    return step_time(shape, layout, hw, overlap_dp=False)
