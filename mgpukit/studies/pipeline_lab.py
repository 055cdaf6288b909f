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
``free_p2p=False`` keeps the profile's links. By default the lab runs in **unit time**
(`unit_time_profile`: only matmuls cost, one stage's forward = 1 µs, so F = 1, B = 2 and, split,
B = W = 1 — the costs every closed form assumes); ``unit_time=False`` charges the flat-rate
profile's elementwise bytes too, which makes `W` (accumulating into ``.grad``) the heaviest pass.

``run_lab(specs, p=4)`` runs every spec — ``{"schedule": "1f1b", "m": 8, "v": 1}`` — one
after the other inside ONE launch (a launch costs seconds on a small machine) and returns one
result record per spec. It goes the way every run goes — `mgpukit.prepare` (the layout:
``layout={"num_micro_batches": m, "v": v}``), one launch (`mgpukit.experiment.run_each`), the
pipeline applier, the one trainer, the record (`finish`) — with the model knobs any run can
take: ``model_sizes`` (the square MLP is ``mlp-tiny`` at ``width × n_layers``) and
``input_grad``. No parity check: the point is the schedule's time. The record's ``strategy``
and ``config`` then say what the lab ran (``pp-1f1b m=8``; the square MLP, rows per
micro-batch, whether p2p was free), as its figures show them. Micro-batches keep ``rows`` rows
each, so the global batch grows with ``m`` — the activation memory GPipe holds grows with it.
"""
from __future__ import annotations

import dataclasses
import math
import warnings

from mgpukit import strategies
from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import Link, load_profile
from mgpukit.experiment import run_each
from mgpukit.prepare import Prepared, prepare
from mgpukit.runtime.launcher import OversubscribedWarning

_FREE = Link(alpha=0.0, beta=1e30)


def free_p2p_profile(name: str = "h100-nvlink"):
    """Profile ``name`` with free links (no latency, unlimited bandwidth), kernels only (no
    host dispatch or launches, no minimum kernel time) and every matmul at one flat rate (no
    GEMM-by-shape table): compute only. The matmuls cost what their FLOPs say; the elementwise
    work is still charged by the bytes it moves — and the weight-gradient pass `W` has one such
    op per parameter, the accumulation into ``.grad`` (pipelines keep their gradients between
    micro-batches), which makes `W` the heaviest pass of this small MLP (notebook 04, section 3,
    prints F, B and W). The titles say "flat-rate"."""
    base = load_profile(name).kernels_only()
    return dataclasses.replace(base, name=f"{name} flat-rate, p2p free", intra_node=_FREE,
                               inter_node=_FREE, gemm=None, attention=None)


def unit_time_profile(name: str = "h100-nvlink", *, stage_flops: float):
    """The lab in **unit time** (notebook 04): only matmuls cost, one stage's forward of one
    micro-batch (`stage_flops`) takes exactly one unit (1 µs on the virtual clock), and elementwise
    work (activations, the loss, accumulating into `.grad`, the optimizer's step) and messages are
    free. A square layer's backward is then two matmuls, B = 2 — split as ZB-H1 splits it, the
    input's gradient B = 1 and the weights' W = 1 — so each schedule's bubble lands on its closed
    form, which assumes exactly these costs (Qi et al. 2023 take F = B = W)."""
    base = free_p2p_profile(name)
    rate = stage_flops / 1e-6 / base.compute_efficiency  # peak FLOP/s with one stage forward = 1 µs
    flops = dataclasses.replace(base.peak_flops, **{k: rate for k in ("fp32", "tf32", "bf16", "fp16")})
    return dataclasses.replace(base, name="unit time (F = 1), no profile, p2p free", peak_flops=flops,
                               memory_bandwidth=1e30)


def lab_layers(p: int, vs) -> int:
    """Layers of the square MLP: enough for ``p·v`` equal stages for every ``v`` asked (and 2·p)."""
    return p * math.lcm(2, *vs)


def lab_runs(specs: list[dict], *, p: int, mode: str, profile, width: int, rows: int,
             steps: int) -> list[Prepared]:
    """Each spec prepared as a run of the pipeline strategy of its schedule (``mlp-tiny`` sized
    as the square MLP, its input requiring a gradient, the kit's SGD): refused here, before the
    launch, if a (schedule, p, m, v) cannot run."""
    sizes = {"d_in": width, "d_hidden": width, "n_layers": lab_layers(p, [s["v"] for s in specs]),
             "d_out": width}
    by_schedule = {}  # the kit's pipeline strategy of each schedule (its own executor)
    for strat in strategies.available():
        if strat.family == "pipeline" and strat.pipeline == "ours":
            by_schedule.setdefault(strat.schedule, strat.name)
    runs = []
    for spec in specs:
        cfg = RunConfig(model="mlp-tiny", steps=steps, global_batch=spec["m"] * rows, lr=0.01,
                        options={"model_sizes": sizes, "input_grad": True})
        asked_v = spec["schedule"] == "interleaved" or spec["v"] != 1  # plan_for says where v applies
        layout = {"num_micro_batches": spec["m"]} | ({"v": spec["v"]} if asked_v else {})
        runs.append(prepare(by_schedule[spec["schedule"]], workers=p, mode=mode, profile=profile, config=cfg,
                            layout=layout))
    return runs


def run_lab(specs: list[dict], *, p: int = 4, mode: str = "emulated",
            profile: str = "h100-nvlink", free_p2p: bool = True, unit_time: bool = True,
            width: int = 256, rows: int = 8, steps: int = 2, timeout_s: float = 300.0) -> list[dict]:
    """One launch of ``p`` workers; one result record per spec (see the module docstring)."""
    specs = [{"schedule": s["schedule"], "m": int(s["m"]), "v": int(s.get("v", 1))} for s in specs]
    n_layers = lab_layers(p, [s["v"] for s in specs])
    prof = None
    if mode == "emulated" and unit_time:  # one stage's forward: its layers' matmuls, one micro-batch
        prof = unit_time_profile(profile, stage_flops=n_layers // p * 2 * rows * width * width)
    elif mode == "emulated":
        prof = free_p2p_profile(profile) if free_p2p else load_profile(profile)
    runs = lab_runs(specs, p=p, mode=mode, profile=prof, width=width, rows=rows, steps=steps)
    with warnings.catch_warnings():
        if mode == "emulated":  # virtual time does not care how many cores there are
            warnings.simplefilter("ignore", OversubscribedWarning)
        records = run_each(runs, timeout_s=timeout_s)
    for spec, rec in zip(specs, records):  # what the lab ran, as its figures name it
        name = rec["strategy"] + (f" v={spec['v']}" if spec["v"] > 1 else "")   # the kit's name: mp-naive, pp-zb, …
        rec["strategy"] = f"{name} m={spec['m']}"
        rec["config"] = {"model": f"square-mlp {width}x{n_layers}", "steps": steps,
                         "global_batch": spec["m"] * rows, "micro_batches": spec["m"], "options": spec,
                         "rows_per_microbatch": rows, "free_p2p": free_p2p or unit_time,
                         "unit_time": unit_time and mode == "emulated"}
    return records
