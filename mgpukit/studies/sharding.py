"""Notebook 06 (and `mgpukit bench memory`): the ZeRO stages measured next to their formulas.

- `sharding_study`      one run per strategy (DDP, zero1-3, fsdp2): measured bytes per rank of
                        params, grads and optimizer states and bytes sent per step, each beside
                        the cost model's ZeRO figure (`strategies.sharding.theory`)
- `step_time_ratio`     zero3 vs fsdp2 step time, interleaved repeats, warm-up steps dropped
- `model_state_table`   predicted bytes per GPU for any parameter count (7B, 70B …), stage by stage
- `offload_trade`       what CPU offload saves on the device and what it sends over PCIe
"""
from __future__ import annotations

import statistics

from mgpukit.config import RunConfig
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import model_state_bytes, offload_traffic_bytes
from mgpukit.experiment import run
from mgpukit.measure.spread import summarize
from mgpukit.strategies.sharding.theory import optimizer_states, predicted_model_states
from mgpukit.training.building import count_params

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp2")
STAGE = {"ddp": 0, "dp-naive": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp2": 3}
CATEGORIES = ("params", "grads", "optimizer")


def n_params(model: str = "gpt-tiny") -> int:
    return count_params(RunConfig(model=model))


def sharding_study(strategies=STRATEGIES, *, workers: int = 2, steps: int = 3, model: str = "gpt-tiny",
                   optimizer: str = "adamw", parity: bool = True) -> dict:
    """Run each strategy once; rows of measured vs predicted model-state bytes (rank 0 and the
    largest rank), bytes sent per step, and each run's record."""
    psi = n_params(model)
    lr = 1e-3 if optimizer == "adamw" else 0.1
    rows, records = [], {}
    for name in strategies:
        rec = run(name, workers=workers, steps=steps, mode="cpu", model=model, optimizer=optimizer,
                  lr=lr, parity=parity)
        records[name] = rec
        want = predicted_model_states(psi, dp=workers, zero=STAGE[name], optimizer=optimizer)
        measured = {c: max(rec["memory"][r][c] for r in rec["memory"]) for c in CATEGORIES}
        sent = max(rec["comm"][r]["bytes_sent"] for r in rec["comm"]) / steps
        rows.append({
            "strategy": name, "zero": STAGE[name], "workers": workers,
            "measured": measured, "predicted": {c: want["memory"][c] for c in CATEGORIES},
            "measured_total": sum(measured.values()),
            "predicted_total": sum(want["memory"][c] for c in CATEGORIES),
            "bytes_sent_per_step": sent, "predicted_bytes_per_step": want["comm_bytes"],
            "parity_ok": rec["parity"]["ok"] if rec.get("parity") else None,
        })
    base = next((r["bytes_sent_per_step"] for r in rows if r["zero"] == 0), None)
    for r in rows:
        r["memory_ratio"] = r["measured_total"] / r["predicted_total"]
        r["comm_ratio"] = r["bytes_sent_per_step"] / r["predicted_bytes_per_step"]
        r["comm_vs_ddp"] = r["bytes_sent_per_step"] / base if base else None
    return {"psi": psi, "model": model, "optimizer": optimizer, "rows": rows, "records": records}


def step_time_ratio(a: str = "zero3", b: str = "fsdp2", *, workers: int = 2, steps: int = 8,
                    repeats: int = 3, warmup: int = 4, options_b: dict | None = None, **kw) -> dict:
    """Median step time of `a` over `b` (measured, CPU workers), runs interleaved a, b, a, b …
    and the first `warmup` steps of every run dropped (FSDP2 initialises lazily)."""
    summaries = {a: [], b: []}

    def median_step(name, options=None):
        rec = run(name, workers=workers, steps=steps, mode="cpu", parity=False, options=options or {}, **kw)
        summaries[name].append(summarize(rec["step_time_s"][warmup:], skip=0))  # its spread, warm-up dropped
        return statistics.median(rec["step_time_s"][warmup:])

    ta, tb = [], []
    for _ in range(repeats):
        ta.append(median_step(a))
        tb.append(median_step(b, options_b))
    ratio = statistics.median(x / y for x, y in zip(ta, tb))
    return {"a": a, "b": b, "a_step_s": ta, "b_step_s": tb, "ratio": ratio, "workers": workers,
            "steps": steps, "repeats": repeats, "warmup": warmup,
            "a_step_time": summaries[a], "b_step_time": summaries[b]}


def model_state_table(psi: float, *, dp: int = 8, dtype: str = "bf16", optimizer: str = "adamw") -> list[dict]:
    """Predicted bytes per GPU of params, grads and optimizer states for ZeRO stages 0-3
    (the paper's Figure 1 for any Ψ)."""
    out = []
    for zero in range(4):
        mem = model_state_bytes(psi, Layout(dp=dp, zero=zero, dtype=dtype),
                                optimizer_states=optimizer_states(optimizer))
        out.append({"zero": zero, **mem, "total": sum(mem.values())})
    return out


def offload_trade(psi: float, *, dp: int = 8, dtype: str = "bf16", optimizer: str = "adamw",
                  host_link_bytes_per_s: float = 50e9) -> dict:
    """ZeRO-3 with and without CPU offload: model-state bytes left on each GPU, bytes crossing
    the host link per step, and the seconds that costs at `host_link_bytes_per_s`."""
    layout = Layout(dp=dp, zero=3, dtype=dtype)
    on_gpu = model_state_bytes(psi, layout, optimizer_states=optimizer_states(optimizer))
    traffic = offload_traffic_bytes(psi, layout)
    return {"gpu_bytes_without_offload": sum(on_gpu.values()), "gpu_bytes_with_offload": 0.0,
            "host_link_bytes_per_step": traffic, "host_link_s_per_step": traffic / host_link_bytes_per_s,
            "host_link_bytes_per_s": host_link_bytes_per_s}
