"""The cure for an unbalanced pipeline: cut the layers by cost, not by count.

A GPT's first stage also embeds and its last stage also projects to the vocabulary and computes
the loss; with equal numbers of blocks per stage the last stage is the slowest, and in 1F1B's
steady state every rank runs at the pace of the slowest (the bubble's "imbalance" share,
`measure.idle`). Megatron-LM places the layers stage by stage for this reason
(`--pipeline-model-parallel-layout`), and Llama 3 gives its first and last stages one layer
fewer (Dubey et al. 2024, §3.3.2).

`fastest_split` tries every contiguous split of the blocks into positive counts and costs
each stage with the closed form of one pipeline step (`costmodel.gpt_step.pipeline_step_time`,
kernels only). The cure is the split whose slowest stage (forward + backward of one
micro-batch) is fastest — 1F1B's steady state runs at that stage's pace — and, among those,
the one whose stages are most even. A notebook then runs it (`layout={"stage_layers": split}`)
to see whether the emulated step agrees with the predicted one.
"""
from __future__ import annotations

import itertools

from mgpukit.config import RunConfig
from mgpukit.costmodel.gpt_step import pipeline_step_time
from mgpukit.costmodel.hardware import load_profile


def splits(n_layers: int, stages: int):
    """Every way to cut `n_layers` blocks into `stages` contiguous stages of at least one."""
    for cuts in itertools.combinations(range(1, n_layers), stages - 1):
        bounds = (0, *cuts, n_layers)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def fastest_split(model: str = "gpt2-124m", *, stages: int = 4, global_batch: int = 8,
                   micro_batches: int = 8, profile="h100-nvlink", schedule: str = "1f1b") -> dict:
    """The even split and the fastest split by the closed form: {"even", "best": {"stage_layers",
    "step_s", "stage_fwd_s", "stage_bwd_s"}, "tried": how many splits} (predicted, kernels only)."""
    cfg = RunConfig(model=model).model_config()
    hw = load_profile(profile) if isinstance(profile, str) else profile

    def timed(split):
        t = pipeline_step_time(cfg, global_batch=global_batch, micro_batches=micro_batches, stages=stages,
                               profile=hw, schedule=schedule, stage_layers=split)
        stage_s = [f + b for f, b in zip(t["stage_fwd_s"], t["stage_bwd_s"])]
        return {"stage_layers": split, "step_s": t["total_s"], "stage_fwd_s": t["stage_fwd_s"],
                "stage_bwd_s": t["stage_bwd_s"], "slowest_stage_s": max(stage_s),
                "spread_s": max(stage_s) - min(stage_s)}

    tried = [timed(s) for s in splits(cfg.n_layer, stages)]
    even = (cfg.n_layer // stages,) * stages if cfg.n_layer % stages == 0 else None
    best = min(tried, key=lambda r: (round(r["slowest_stage_s"], 12), r["spread_s"]))
    return {"even": timed(even) if even else None, "best": best, "tried": len(tried)}
