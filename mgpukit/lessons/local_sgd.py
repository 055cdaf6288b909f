"""Notebook 10, local SGD: H local steps, then one average of the weights — bytes against loss.

Measured on CPU workers, the bytes each step sends and the loss it reaches at each H
(`local_sgd_study`; H = 1 is data parallelism); emulated across two nodes of a profile, the
step time beside the closed form's compute + (all-reduce + packing) / H (`local_sgd_emulated`),
with a straggler as an option; and the widget that runs both (`local_sgd_lab`). The strategy
itself is `mgpukit.strategies.data_parallel.local_sgd` (Lin et al. 2020, "Don't Use Large
Mini-Batches, Use Local SGD"). Figures are labelled measured, emulated or predicted.
"""
from __future__ import annotations

import dataclasses

from mgpukit.config import RunConfig
from mgpukit.costmodel.comm import allreduce_time, link_for_ranks
from mgpukit.costmodel.gpt_step import ddp_step_time
from mgpukit.costmodel.hardware import load_profile
from mgpukit.experiment import run
from mgpukit.lessons.tables import markdown_table


def _bytes(rec) -> float:
    return sum(r["bytes_sent"] for r in rec["comm"].values()) / len(rec["comm"])


def local_sgd_study(H=(1, 2, 4, 8), *, steps: int = 16, workers: int = 2, **kw) -> list[dict]:
    """Measured on CPU workers: loss and bytes per step of local SGD for each H. H = 1 is
    data parallelism (`local_sgd.py`: exact for SGD with momentum), the baseline of the ratios."""
    rows = []
    for h in H:
        rec = run("local-sgd", workers=workers, steps=steps, parity=False,
                  options={"local_steps": h}, **kw)
        rows.append({"H": h, "losses": rec["losses"], "bytes_per_step": _bytes(rec) / steps,
                     "final_loss": sum(rec["losses"][-4:]) / 4})
    base = rows[0]
    for r in rows:
        r["bytes_ratio"] = r["bytes_per_step"] / base["bytes_per_step"]
        r["bytes_saved"] = 1 - r["bytes_ratio"]
        r["loss_gap"] = r["final_loss"] / base["final_loss"] - 1
    return rows


def one_gpu_per_node(profile: str = "h100-ib"):
    """`profile` with one GPU per node: two workers then talk over the inter-node network."""
    p = load_profile(profile)
    return dataclasses.replace(p, gpus_per_node=1, name=f"{p.name}, 1 GPU per node")


def local_sgd_emulated(H=(1, 4), *, profile: str = "h100-ib", workers: int = 2, steps: int = 8,
                       global_batch: int = 8, straggler: float = 1.0, kernels_only: bool = True) -> list[dict]:
    """Emulated step time of local SGD across nodes (one GPU per node of `profile`), beside
    its prediction: compute + (all-reduce + packing) / H, from the analytic model. The step time
    is the mean over the last full period (H - 1 local steps and one average).

    ``kernels_only`` (default) runs the clock on the GPU's kernels alone
    (`HardwareProfile.kernels_only`), as the closed form counts them: the tiny model on a GPU is
    launch-bound, and its host launches would hide the all-reduce this lesson is about.
    ``straggler`` > 1 makes rank 1 that many times slower (the `straggler` knob); the
    prediction then says nothing about it (``predicted_s`` is None)."""
    hw = one_gpu_per_node(profile)
    hw = hw.kernels_only() if kernels_only else hw
    cfg = RunConfig(global_batch=global_batch)
    t = ddp_step_time(cfg.model_config(), global_batch=global_batch, workers=workers, profile=hw)
    link = link_for_ranks(range(workers), hw)
    average = allreduce_time(4 * t["params"], workers, link) + 6 * 4 * t["params"] / hw.memory_bandwidth
    local = t["forward_s"] + t["backward_s"] + t["optimizer_s"]
    rows = []
    for h in H:
        options = {"local_steps": h}
        if straggler > 1:
            options["straggler"] = {"rank": 1, "factor": straggler}
        rec = run("local-sgd", workers=workers, steps=steps, mode="emulated", profile=hw, parity=False,
                  global_batch=global_batch, options=options)
        st = rec["step_time_s"][-h:]  # the last full period: h - 1 local steps and one average
        rows.append({"H": h, "emulated_s": sum(st) / len(st),
                     "predicted_s": local + average / h if straggler == 1 else None, "record": rec})
    if straggler == 1:
        rows.append({"H": "DDP", "emulated_s": None, "predicted_s": t["total_s"], "record": None})
    for r in rows:
        r["link"] = f"inter-node α={link.alpha * 1e6:.0f} µs, β={link.beta / 1e9:.0f} GB/s"
        r["average_s"], r["local_s"] = average, local
    return rows


def local_sgd_markdown(rows: list[dict]) -> str:
    """`local_sgd_emulated`'s rows as a Markdown table: emulated and predicted step time per H
    (DDP has no emulated column: it is the prediction's baseline)."""
    def us(s):
        return "—" if s is None else f"{s * 1e6:.1f} µs"
    body = [[r["H"], us(r["emulated_s"]), us(r["predicted_s"]),
             "—" if r["emulated_s"] is None else f"{r['emulated_s'] / r['predicted_s']:.3f}"] for r in rows]
    return markdown_table(["H", "emulated step", "predicted step", "emulated / predicted"], body)


def rank_kernel_seconds(record: dict) -> list[float]:
    """Per rank, seconds of forward and backward kernels over a record's steps after the first,
    on its clock: how much slower a straggler really computed (the knob's factor stretches each
    op's rate; a kernel's fixed latency may not stretch with it)."""
    out = [0.0] * record["world_size"]
    for e in record["timeline"]:
        if e["stream"] == "compute" and e["kind"] in ("fwd", "bwd") and (e.get("step") or 0) >= 1:
            out[e["rank"]] += e["end"] - e["start"]
    return out


