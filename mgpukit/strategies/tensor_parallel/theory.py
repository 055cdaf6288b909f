"""Predicted figures of a tensor-parallel run: collectives and bytes per step, memory per rank."""
from __future__ import annotations
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.tensor_parallel import tp_block_bytes_per_step, tp_bytes_per_step, tp_collectives


def tp_theory(cfg, dims) -> dict:
    """What the cost model expects of this run (`mgpukit.costmodel.tensor_parallel`)."""
    layout = cfg.layout
    shape = ModelShape.from_gpt_config(cfg.model_config())
    counts = {kind: sum(c for c, _ in items) * cfg.steps
              for kind, items in tp_collectives(shape, layout).items()}
    return {
        "tp_bytes_per_step": tp_bytes_per_step(shape, layout),
        "tp_block_bytes_per_step": tp_block_bytes_per_step(shape, layout),
        "tp_collectives": counts,  # over the whole run (steps × per step)
    }
