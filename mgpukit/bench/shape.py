"""`mgpukit bench shape`: the real program at real scale (shape mode), checked three ways.

Shape mode (`mgpukit.measure.shape`) runs a strategy's own code under fake tensors on the
virtual clock, so a GPT-2 350M on 8 emulated H100s takes seconds of host time per rank. This
benchmark asks whether those figures can be believed:

1. **analytic vs emulated step time**, five layouts of gpt2-350m on 8 ranks of h100-nvlink
   (DP, PP 1F1B, interleaved 1F1B, TP, ZeRO-1). The analytic side is a closed form that runs
   no program: `costmodel.gpt_step` (DDP, 1F1B: the emulator's roofline op by op), the
   planner's `step_time` for the interleaved pipeline (stages by their own cost) and TP (plus,
   for TP, the kit's own unfused ops the planner's Megatron layer has not: `kit_tp_layer_extra`), and
   `gpt_step`'s pieces plus the alpha-beta reduce-scatter / all-gather for ZeRO-1. Target 10%.
2. **emulated peak memory per rank vs the cost model's**: the caching allocator's high-water
   mark on both sides (`measure.allocator` op by op; `costmodel.memory.allocator_peak` in closed
   form), per layout. Target 5%.
3. **wall time of one 8-rank emulated step of gpt2-1.3b** (ddp): target ≤ 60 s on this host.

Each gap is printed with its reason, never tuned away.
"""
from __future__ import annotations

import dataclasses
import time
import warnings

from mgpukit.bench import bench
from mgpukit.config import RunConfig
from mgpukit.costmodel import step_time
from mgpukit.costmodel.comm import allgather_time, link_for_ranks, reduce_scatter_time
from mgpukit.costmodel.gpt_ops import gpt_params, kernel_seconds, sgd_ops, stage_ops, stream_seconds
from mgpukit.costmodel.gpt_step import ddp_step_time, pipeline_step_time
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.kernels import memory_seconds
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import allocator_peak
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.experiment import run
from mgpukit.runtime.launcher import OversubscribedWarning

PROFILE = "h100-nvlink"
MODEL = "gpt2-350m"
WORKERS = 8
GLOBAL_BATCH = 8
E = 4  # fp32 bytes

# (label, strategy, run keywords)
LAYOUTS = (
    ("DP (ddp)", "ddp", {}),
    ("PP 1F1B", "pp-1f1b", {"micro_batches": 8}),
    ("PP interleaved v=3", "pp-interleaved", {"micro_batches": 8, "layout": {"v": 3}}),
    ("TP", "tp", {}),
    ("ZeRO-1", "zero1", {}),
)


def run_shape(strategy: str, *, model: str = MODEL, workers: int = WORKERS, steps: int = 2, **kw) -> dict:
    """One shape-mode run on `workers` emulated ranks of PROFILE (no parity: nothing to compare)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        return run(strategy, workers=workers, mode="emulated", profile=PROFILE, shape=True,
                   model=model, steps=steps, global_batch=kw.pop("global_batch", GLOBAL_BATCH),
                   timeout_s=1800, **kw)


# ------------------------------------------------------------------------------ analytic


def _ops_seconds(cfg, batch, profile, **where):
    """Forward and backward seconds of `cfg`'s ops, the host issuing them (`gpt_ops.Stream`)."""
    ops = stage_ops(cfg, batch, **where)
    return stream_seconds(ops["fwd"], profile), stream_seconds(ops["bwd"], profile), ops["params"]


def kit_tp_layer_extra(shape: ModelShape, layout: Layout, profile) -> float:
    """Seconds one layer of the kit's tensor-parallel GPT spends in memory-bound kernels that the
    planner's layer (Megatron's fused kernels, `costmodel.steptime._layer_kernels`) does not have:

    - `g`'s forward copies its input before the in-place all-reduce and `f`'s backward copies the
      gradient (`strategies.tensor_parallel.comm`: ``x.contiguous().clone()``), two each per
      layer: ``4 · 2e·act``;
    - the row-parallel bias is added in its own kernel after the sum (Megatron fuses it into the
      dropout-add), o and fc2: ``2 · 2e·act``;
    - each linear's bias gradient, a column sum of its output gradient (the planner omits these
      for every layout): q, k, v and fc1 by their split width, o and fc2 whole.

    ``act`` = tokens × d_model elements of a replicated activation. GPT-2 350M at tp 8, batch 8,
    h100-nvlink: 171 µs a layer (the emulator's kit layer minus the planner's: 195 µs)."""
    n, d, f, t, e = layout.micro_batch * shape.seq_len, shape.d_model, shape.d_ff, layout.tp, layout.dtype_bytes
    act = n * d
    nbytes = 4 * 2 * e * act + (2 * 2 * e * act if shape.bias else 0)
    if shape.bias:
        nbytes += e * n * ((d + 2 * shape.kv_dim + f) / t + 2 * d)
    return memory_seconds(nbytes, profile)


def analytic_step(strategy: str, cfg, record: dict, profile) -> tuple[float, str]:
    """(seconds, how) of one steady step of `record`'s layout, by a closed form."""
    lay = record["layout"]
    n, b = WORKERS, GLOBAL_BATCH
    if strategy == "ddp":
        return ddp_step_time(cfg, global_batch=b, workers=n, profile=profile)["total_s"], "gpt_step.ddp_step_time"
    if strategy == "pp-1f1b":
        return (pipeline_step_time(cfg, global_batch=b, micro_batches=lay["num_micro_batches"], stages=n,
                                   profile=profile, schedule="1f1b")["total_s"], "gpt_step.pipeline_step_time")
    if strategy == "pp-interleaved":
        # the planner's schedule model (`costmodel.steptime`): per-stage busy time with the
        # embedding on the first stage and the LM head on the last, fill and drain over v chunks
        shape = ModelShape.from_gpt_config(cfg)
        lay_ = Layout(pp=lay["pp"], schedule="interleaved", v=lay["v"], num_micro_batches=lay["num_micro_batches"],
                      micro_batch=b // lay["num_micro_batches"], dtype="fp32")
        return step_time(shape, lay_, profile)["total_s"], "costmodel.step_time (planner: stages by their own cost)"
    if strategy == "tp":
        shape = ModelShape.from_gpt_config(cfg)
        lay_ = Layout(tp=n, micro_batch=b, dtype="fp32")
        return (step_time(shape, lay_, profile)["total_s"] + shape.n_layer * kit_tp_layer_extra(shape, lay_, profile),
                "costmodel.step_time (planner) + the kit's unfused TP ops and bias gradients per layer")
    if strategy == "zero1":
        ops = stage_ops(cfg, b // n, layers=cfg.n_layer, embed=True, head=True)
        params = ops["params"]
        link = link_for_ranks(range(n), profile)
        pieces = gpt_params(cfg)
        units = [pieces["embed"]] + [pieces["layer"]] * cfg.n_layer + [pieces["head"]]
        comm = sum(reduce_scatter_time(E * u, n, link) + allgather_time(E * u, n, link) for u in units)
        divide = 2 * E * params / n / profile.memory_bandwidth  # the shard's gradient / n
        every = ops["fwd"] + ops["bwd"] + sgd_ops(params // n, foreach=profile.async_launch)
        device = kernel_seconds(every, profile) + comm + divide
        # the host issues every op and 2 collectives per unit, running ahead of the device
        host = sum(op.host_seconds(profile) for op in every) + 2 * len(units) * profile.collective_launch
        return (max(device, host) if profile.async_launch else device + host,
                "gpt_step ops + Σ units (reduce-scatter + all-gather) + SGD on 1/n; host or device, the later")
    raise ValueError(strategy)


# -------------------------------------------------------------------------------- memory


def predicted_memory(cfg, record: dict) -> float:
    """Peak bytes on rank 0 by the cost model for this run: the caching allocator's high-water
    mark (`costmodel.memory.allocator_peak`: the categories, the loss's backward on the stage
    that holds the head, two cuBLAS workspaces), fp32, SGD with momentum (one state per
    parameter; the gradients stay between steps), fused attention (`Layout.flash_attention`)."""
    shape = ModelShape.from_gpt_config(cfg)
    lay = Layout(**record["layout"])
    return allocator_peak(shape, lay, stage=0, optimizer_states=1, ddp_buckets=record["strategy"] == "ddp",
                          workspace=load_profile(PROFILE).blas_workspace)["peak"]


# --------------------------------------------------------------------------------- bench


def layout_rows(*, model: str = MODEL, steps: int = 2, layouts=LAYOUTS, echo: bool = False) -> list[dict]:
    """Each layout run in shape mode, its analytic step time and predicted memory beside it
    (`echo`: print each row as it comes)."""
    profile = load_profile(PROFILE)
    cfg = RunConfig(model=model).model_config()
    rows = []
    for label, strategy, kw in layouts:
        t0 = time.perf_counter()
        record = run_shape(strategy, model=model, steps=steps, **dict(kw))
        wall = time.perf_counter() - t0
        emulated = record["step_time_s"][-1]  # steady state: the last step
        analytic, how = analytic_step(strategy, cfg, record, profile)
        measured_mem = record["memory"]["0"]["peak"]
        predicted_mem = predicted_memory(cfg, record)
        rows.append({"layout": label, "strategy": strategy, "dims": record["dims"],
                     "analytic_s": analytic, "emulated_s": emulated, "ratio": analytic / emulated,
                     "within_10pct": abs(analytic / emulated - 1) <= 0.10, "analytic_from": how,
                     "memory_emulated": measured_mem, "memory_predicted": predicted_mem,
                     "memory_ratio": predicted_mem / measured_mem,
                     "memory_within_5pct": abs(predicted_mem / measured_mem - 1) <= 0.05,
                     "wall_s": wall})
        if echo:
            _print(rows[-1:], header=len(rows) == 1)
    return rows


def big_step_wall(model: str = "gpt2-1.3b", strategy: str = "ddp") -> dict:
    """Wall seconds of one 8-rank emulated step of `model` (launch included)."""
    t0 = time.perf_counter()
    record = run_shape(strategy, model=model, steps=1)
    wall = time.perf_counter() - t0
    return {"model": model, "strategy": strategy, "wall_s": wall, "within_60s": wall <= 60.0,
            "emulated_step_s": record["step_time_s"][0], "peak_bytes_rank0": record["memory"]["0"]["peak"]}


def _print(rows: list[dict], *, header: bool = True) -> None:
    head = (f"{'layout':<20} {'dims':<18} {'analytic':>10} {'emulated':>10} {'ratio':>6} 10%  "
            f"{'mem pred':>9} {'mem emul':>9} {'ratio':>6} 5%   wall")
    if header:
        print(head)
        print("-" * len(head))
    for r in rows:
        dims = "x".join(f"{k}{v}" for k, v in r["dims"].items() if v > 1)
        print(f"{r['layout']:<20} {dims:<18} {r['analytic_s'] * 1e3:>8.2f}ms {r['emulated_s'] * 1e3:>8.2f}ms "
              f"{r['ratio']:>6.3f} {'yes' if r['within_10pct'] else 'NO ':<4} "
              f"{r['memory_predicted'] / 2**30:>7.2f}G {r['memory_emulated'] / 2**30:>7.2f}G "
              f"{r['memory_ratio']:>6.3f} {'yes' if r['memory_within_5pct'] else 'NO ':<4} {r['wall_s']:>5.0f}s")
    for r in rows:
        print(f"  {r['layout']}: analytic from {r['analytic_from']}", flush=True)


@bench("shape", help="shape mode (fake tensors, real scale): analytic vs emulated step time and "
                     "memory of gpt2-350m on 8 emulated H100 (5 layouts), and the wall time of a "
                     "gpt2-1.3b step")
def bench_shape(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    layouts = LAYOUTS[:1] if quick else LAYOUTS
    model = "gpt2-124m" if quick else MODEL
    print(f"1-2. {model} on {WORKERS} emulated ranks of {PROFILE}, global batch {GLOBAL_BATCH}, fp32, "
          f"SGD (shape mode: fake tensors)")
    rows = layout_rows(model=model, layouts=layouts, echo=True)
    out = {"layouts": [dataclasses.asdict(r) if dataclasses.is_dataclass(r) else r for r in rows]}
    if not quick:
        big = big_step_wall()
        print(f"\n3. one {WORKERS}-rank emulated step of {big['model']} ({big['strategy']}): "
              f"{big['wall_s']:.1f} s wall (target ≤ 60 s: {'yes' if big['within_60s'] else 'NO'}); "
              f"emulated step {big['emulated_step_s'] * 1e3:.1f} ms, peak {big['peak_bytes_rank0'] / 2**30:.1f} GiB/rank")
        out["big_step"] = big
    return out
