"""A hybrid (dp × tp × pp) run and the cost model's step beside the virtual clock's (notebook 08,
`mgpukit bench hybrid`).

- `run_hybrid`            `mgpukit.run("hybrid")` at `(dp, tp, pp)`
- `analytic_vs_emulated`  per layout: the closed form's step and the emulated one, and their ratio
"""
from __future__ import annotations

import statistics
import warnings

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.experiment import run
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.launcher import OversubscribedWarning
from mgpukit.strategies.hybrid.theory import predicted_step


def dims_of(dims) -> ParallelDims:
    """`(dp, tp, pp)` (or a ParallelDims) -> ParallelDims."""
    return dims if isinstance(dims, ParallelDims) else ParallelDims(dp=dims[0], tp=dims[1], pp=dims[2])


def run_hybrid(dims=(2, 2, 2), *, steps: int = 2, **kw) -> dict:
    """`mgpukit.run("hybrid")` at `(dp, tp, pp)`; keywords as `mgpukit.run` (mode, profile …);
    ``layout`` adds fields to the dims' (e.g. ``num_micro_batches``)."""
    d = dims_of(dims)
    layout = {**d.as_dict(), **kw.pop("layout", {})}
    with warnings.catch_warnings():  # 8 workers on 2 cores: correct, wall clock distorted
        warnings.simplefilter("ignore", OversubscribedWarning)
        return run("hybrid", workers=d.world_size, steps=steps, layout=layout, **kw)


def last_step(record: dict) -> float:
    """The step time of a record without its first step (warm-up), median."""
    steps = record["step_time_s"]
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


def layout_of(record: dict) -> Layout:
    return Layout(**record["layout"])


# (dp, tp, pp, m) of 8 ranks: every axis alone and together (the bench's five)
LAYOUTS = ((2, 2, 2, 4), (1, 2, 4, 8), (2, 1, 4, 4), (1, 4, 2, 4), (4, 2, 1, 2))


def analytic_vs_emulated(layouts=LAYOUTS, *, profile="h100-nvlink", model: str = "gpt-tiny",
                         steps: int = 2, global_batch: int = 8, shape: bool = False) -> list[dict]:
    """Per layout: the cost model's step time and the virtual clock's (8 CPU workers running
    the real program), and their ratio.

    ``shape=True``: the program at real scale under fake tensors (`mgpukit.measure.shape`;
    e.g. ``model="gpt2-350m"``) on the full profile, host launches included — at that size
    the kernels are long enough to hide them, as on a GPU. Otherwise (the tiny model) both
    sides on the profile's kernels only (`HardwareProfile.kernels_only`): the closed form
    counts no host launches, and a tiny model's step on a GPU is made of them
    (`mgpukit.studies.launch`)."""
    hw = load_profile(profile) if isinstance(profile, str) else profile
    if not shape:
        hw = hw.kernels_only()
    rows = []
    for dp, tp, pp, m in layouts:
        rec = run_hybrid((dp, tp, pp), steps=steps, mode="emulated", profile=hw, parity=False,
                         model=model, global_batch=global_batch, micro_batches=m, shape=shape)
        analytic = predicted_step(model, layout_of(rec), hw)["total_s"]
        emulated = last_step(rec)
        rows.append({"dp": dp, "tp": tp, "pp": pp, "m": m, "analytic_s": analytic, "emulated_s": emulated,
                     "ratio": analytic / emulated, "within_10pct": abs(analytic / emulated - 1) <= 0.10})
    return rows


AXES = ("tp", "dp", "pp")


def axis_groups(dims, axis: str) -> list[list[int]]:
    """Every group of global ranks along `axis` (the mesh is (pp, dp, tp), tp fastest)."""
    d = dims_of(dims)
    seen, groups = set(), []
    for r in range(d.world_size):
        c = d.coords(r)
        group = [d.rank_of(**{**c, axis: i}) for i in range(getattr(d, axis))]
        if tuple(group) not in seen:
            seen.add(tuple(group))
            groups.append(group)
    return groups


def axis_collectives(theory: dict) -> dict[str, str]:
    """Per axis, what one rank issues per step (the cost model's counts, stage by stage)."""
    out = {}
    for axis in AXES:
        per_stage = [s["collectives"][axis] for s in theory["stages"]]
        if not any(per_stage):
            out[axis] = "nothing (degree 1)"
            continue
        kinds = sorted({k for s in per_stage for k in s})
        counts = ", ".join(f"{k} ×{' | '.join(str(s.get(k, 0)) for s in per_stage)}" for k in kinds)
        out[axis] = counts + (f" (stage {' | '.join(str(i) for i in range(len(per_stage)))})"
                              if len(per_stage) > 1 else "")
    return out


