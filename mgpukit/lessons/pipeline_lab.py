"""The pipeline lab: schedules on stages that really cost the same, several runs per launch.

The bubble formulas (``(p-1)/(m+p-1)``, ...) assume every stage takes the same time and
messages are free. Our GPT breaks both: stage 0 also embeds, the last stage also projects
to the vocabulary and computes the loss (with the host's launches charged, the stages' op
counts differ: ``record["idle_split"]`` calls it imbalance), and a message pays ``alpha``
≈ 2 µs plus its launch. So the lab trains a
*square MLP* — every layer ``Linear(width, width) + ReLU`` (the last without the ReLU), the
input itself requiring a gradient so stage 0's backward does the same work as the others —
and by default makes point-to-point free (the profile's links get ``alpha = 0`` and an
unlimited ``beta``) and charges kernels only (`HardwareProfile.kernels_only`: no host
dispatch or launch, so a stage costs its FLOPs and bytes): what is left is the schedule. Say so wherever its numbers are shown;
``free_p2p=False`` keeps the profile's links.

``run_lab(specs, p=4)`` runs every spec — ``{"schedule": "1f1b", "m": 8, "v": 1}`` — one
after the other inside ONE launch (a launch costs seconds on a small machine) and returns one
result record per spec, as ``mgpukit.run`` would (no parity check: the single-process
reference trains the kit's models, not this one). Micro-batches keep ``rows`` rows each, so
the global batch grows with ``m`` — the activation memory GPipe holds grows with it.
"""
from __future__ import annotations

import dataclasses
import math
import warnings

import torch

from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import Link, load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.measure.record import build_record
from mgpukit.measure.recorder import Recorder
from mgpukit.models.mlp import MLP, MLPConfig
from mgpukit.runtime.context import current
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.hardware import env_info
from mgpukit.runtime.launcher import OversubscribedWarning, launch
from mgpukit.strategies.pipeline.engine import apply_pipeline
from mgpukit.strategies.pipeline.plan import PipelinePlan, theory_for
from mgpukit.training.trainer import train

_FREE = Link(alpha=0.0, beta=1e30)


def free_p2p_profile(name: str = "h100-nvlink"):
    """Profile ``name`` with free links (no latency, unlimited bandwidth) and kernels only
    (no host dispatch or launches): compute only."""
    base = load_profile(name).kernels_only()
    return dataclasses.replace(base, name=f"{name} (kernels only, p2p free)", intra_node=_FREE,
                               inter_node=_FREE)


def lab_layers(p: int, vs) -> int:
    """Layers of the square MLP: enough for ``p·v`` equal stages for every ``v`` asked (and 2·p)."""
    return p * math.lcm(2, *vs)


def _batches(m: int, rows: int, width: int):
    def batches(step: int):
        g = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(m * rows, width, generator=g).requires_grad_()  # stage 0 computes dx
        return x, torch.randn(m * rows, width, generator=g)
    return batches


class _Loader:
    def __init__(self, batches):
        self.batches, self.step = batches, 0

    def next(self, rec):
        self.step += 1
        return self.batches(self.step - 1)


def _lab_worker(specs: list[dict], width: int, n_layers: int, rows: int, steps: int):
    ctx = current()
    out = []
    for spec in specs:
        rec = Recorder(ctx)
        torch.manual_seed(0)
        model = MLP(MLPConfig(d_in=width, d_hidden=width, n_layers=n_layers, d_out=width))
        layout = Layout(pp=ctx.world_size, schedule=spec["schedule"], v=spec["v"],
                        num_micro_batches=spec["m"], micro_batch=rows, dtype="fp32")
        parts = apply_pipeline(ctx, rec, model, layout, torch.nn.functional.mse_loss)
        # the one trainer; of the run config only `steps` (and no options) is read here
        train(ctx, rec, RunConfig(model="mlp-tiny", steps=steps), parts,
              torch.optim.SGD(parts.params, lr=0.01), loader=_Loader(_batches(spec["m"], rows, width)))
        out.append(rec.result())
    return out


def run_lab(specs: list[dict], *, p: int = 4, mode: str = "emulated",
            profile: str = "h100-nvlink", free_p2p: bool = True, width: int = 256,
            rows: int = 8, steps: int = 2, timeout_s: float = 300.0) -> list[dict]:
    """One launch of ``p`` workers; one result record per spec (see the module docstring)."""
    specs = [{"schedule": s["schedule"], "m": int(s["m"]), "v": int(s.get("v", 1))} for s in specs]
    plans = [PipelinePlan(schedule=s["schedule"], p=p, m=s["m"], v=s["v"]) for s in specs]
    for plan in plans:
        theory_for(plan)  # refuses a bad (schedule, p, m, v) before launching
    n_layers = lab_layers(p, [s["v"] for s in specs])
    prof = None
    if mode == "emulated":
        prof = free_p2p_profile(profile) if free_p2p else load_profile(profile)
    with warnings.catch_warnings():
        if mode == "emulated":  # virtual time does not care how many cores there are
            warnings.simplefilter("ignore", OversubscribedWarning)
        results = launch(_lab_worker, p, specs, width, n_layers, rows, steps, mode=mode,
                         dims=ParallelDims(pp=p),
                         profile=prof, timeout_s=timeout_s, echo=False)
    env = env_info()
    records = []
    for k, (spec, plan) in enumerate(zip(specs, plans)):
        ranks = [r[k] for r in results]
        name = f"pp-{spec['schedule']}" + (f" v={spec['v']}" if spec["v"] > 1 else "")
        config = {"model": f"square-mlp {width}x{n_layers}", "steps": steps,
                  "global_batch": spec["m"] * rows, "micro_batches": spec["m"], "options": spec,
                  "rows_per_microbatch": rows, "free_p2p": free_p2p}
        records.append(build_record(
            strategy=f"{name} m={spec['m']}", mode=mode, profile=prof.name if prof else None,
            dims={"dp": 1, "tp": 1, "pp": p}, config=config, ranks=ranks,
            tokens_per_step=spec["m"] * rows, env=env, theory=theory_for(plan)))
    return records
