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
from mgpukit.display import errors_shown_in, show
from mgpukit.experiment import run
from mgpukit.plots import plot_timeline


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


def rank_kernel_seconds(record: dict) -> list[float]:
    """Per rank, seconds of forward and backward kernels over a record's steps after the first,
    on its clock: how much slower a straggler really computed (the knob's factor stretches each
    op's rate; a kernel's fixed latency may not stretch with it)."""
    out = [0.0] * record["world_size"]
    for e in record["timeline"]:
        if e["stream"] == "compute" and e["kind"] in ("fwd", "bwd") and (e.get("step") or 0) >= 1:
            out[e["rank"]] += e["end"] - e["start"]
    return out


def local_sgd_lab(*, initial: list[dict] | None = None):
    """Widget: pick H and a straggler's slowdown, press Run — local SGD on 2 emulated GPUs in
    two nodes (kernels only) runs at that H and at H = 1 (DDP's traffic), and their step times
    and the H run's timeline show. `initial`: rows of `local_sgd_emulated` to show first."""
    # lazy: start-up (ipywidgets ~0.2 s, for this widget only; lab workers import lessons)
    import ipywidgets as w
    from IPython.display import display  # lazy: as the line above

    pick_h = w.Dropdown(options=[2, 4, 8], value=4, description="H")
    slow = w.Dropdown(options=[1.0, 2.0, 4.0], value=1.0, description="rank 1 slower ×",
                      style={"description_width": "initial"})
    button = w.Button(description="Run it (emulated)", icon="play", button_style="primary",
                      layout=w.Layout(width="auto"))
    out = w.Output()

    def result(rows, factor):
        one, many = rows[0], rows[1]
        who = f"rank 1 ×{factor:g}" if factor > 1 else "no straggler"
        if factor > 1:
            kernels = rank_kernel_seconds(many["record"])
            who += f" (its kernels took ×{kernels[1] / kernels[0]:.2f} rank 0's on the clock)"
        show(out, f"{who}: H=1 {one['emulated_s'] * 1e6:,.1f} µs per step, H={many['H']} "
                  f"{many['emulated_s'] * 1e6:,.1f} µs (emulated, kernels only) — ×{one['emulated_s'] / many['emulated_s']:.2f}; "
                  f"below, the H={many['H']} run's averaging step"
                  + (": the fast rank waits for the slow one only there, once every H steps" if factor > 1 else ""),
             plot_timeline(many["record"], step=len(many["record"]["step_time_s"]) - 1))

    def changed(*_):
        show(out, f"press Run: local SGD at H=1 and H={pick_h.value}, rank 1 ×{slow.value:g} — a few seconds")

    def run_it(*_):
        show(out, "launching 2 emulated workers, twice…")
        with errors_shown_in(out):
            result(local_sgd_emulated(H=(1, pick_h.value), straggler=slow.value), slow.value)

    for c in (pick_h, slow):
        c.observe(changed, names="value")
    button.on_click(run_it)
    if initial is not None:
        pick_h.value = initial[1]["H"]
        result(initial, 1.0)
    else:
        changed()
    box = w.VBox([w.HBox([pick_h, slow, button]), out])
    display(box)
    return box
