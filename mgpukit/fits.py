"""Will this run fit in memory? Asked of the cost model before anything starts.

Real-scale models train for real (GPT-2 124M on a laptop's CPU, GPT-2 1.3B on a GPU), so a run
that cannot fit must be refused up front — with the change that would make it fit — rather than
killed by the kernel's OOM killer after minutes of work.

What is counted (`costmodel.memory.allocator_peak`: the planner's model of Rajbhandari et al.
2020 and Korthikanti et al. 2022, taken to the caching allocator's high-water mark): per rank,
the parameters, gradients and optimizer states of the layers it holds (the kit trains fp32
weights — bf16/fp16 autocast computes in 16 bits over fp32 weights — so 4 + 4 bytes plus 4 per
optimizer state: 1 for SGD with momentum, 2 for AdamW; sharded by ZeRO's stage over dp), the
activations of its micro-batches in flight on the fullest pipeline stage, and what is alive
only at the worst moment, the start of backward:

- the loss's backward on the stage that holds the head: the fp32 log-probabilities are saved,
  and NLL's and log-softmax's fp32 gradients are made beside them — ``12`` bytes per logit
  (GPT-2 124M at 8 × 1,024 tokens: 4.9 GB, of which the old check counted 1.6);
- under bf16/fp16: autocast's 2-byte copy of every weight (alive from its forward to its
  backward), the fp32 norm inputs and 2-byte linear inputs of the kit's per-piece autocast;
  the loss still reads fp32 logits (each piece hands fp32 on), so it stays at 12 bytes per logit;
- on a GPU, two cuBLAS workspaces (32 MiB each on Hopper: the forward's and the autograd
  thread's handle; the profiles' ``[memory] blas_workspace``);
- torch DDP's flat bucket buffers, one more fp32 copy of the gradients, where DDP wraps the
  model: ``ddp`` and ``dp-powersgd`` with more than one worker (Accelerate does not wrap a
  single process).

Held against a real H100 (`data/reference/h100-2026-11-26.json`, ``kit_real_scale``; the
test is tests/test_real_scale.py): GPT-2 124M fp32 SGD, global batch 8, allocator peak 11.86 GB
— the categories alone (the old check) said 8.49; GPT-2 1.3B bf16, global batch 4, 30.28 GB
against 24.31.

Against what:

- **gpu**: each rank has a GPU of its own: its peak against 90 % of that GPU's memory (the
  hardware profiles' `usable_memory`, leaving room for the CUDA context, NCCL's buffers and the
  allocator's fragmentation). The parity reference, run afterwards on GPU 0, is checked too.
- **cpu / emulated** (real tensors on CPU workers): every rank lives in this machine's RAM,
  so their *sum* counts, plus the trained weights sent back to the parent and, for parity,
  the single-process reference trained afterwards — against 90 % of the memory available now.

Not counted: the CUDA context, NCCL's buffers, the allocator's fragmentation (reserved beyond
allocated). It is a refusal of the clearly impossible, not a promise: a run predicted at 95 %
may still fail.
"""
from __future__ import annotations

import dataclasses
from itertools import combinations

import psutil

from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import allocator_peak
from mgpukit.costmodel.shapes import ModelShape, layer_param_split
from mgpukit.runtime.hardware import gpu_info

USABLE = 0.9  # of a GPU's memory, or of the RAM available (module docstring)
GB = 1e9
BLAS_WORKSPACE = 32 * 2**20  # bytes per cuBLAS handle, PyTorch's Hopper default (h100-nvlink.toml [memory])
DDP_WRAPPED = ("ddp", "dp-powersgd")  # strategies whose model Accelerate wraps in torch DDP


def _states_per_param(optimizer: str) -> int:
    return 2 if optimizer == "adamw" else 1  # AdamW: m, v; SGD with momentum: the momentum


def rank_bytes(cfg, layout: Layout, *, optimizer: str | None = None, mode: str = "gpu",
               ddp_buckets: bool = False) -> dict[str, float]:
    """Predicted bytes by category on the fullest rank of `layout` for `cfg`'s GPT, with
    ``transient`` (what exists only at the start of backward) and ``total``, the high-water mark
    (module docstring). ``mode``: a GPU adds the cuBLAS workspaces; ``ddp_buckets``: torch DDP's
    buckets beside the gradients."""
    shape = ModelShape.from_gpt_config(cfg.model_config())
    split, replicated = layer_param_split(shape)
    gather = 2 * (split / layout.tp + replicated) * 4  # ZeRO-3: the layer in use and the next, fp32
    best = None
    for stage in sorted({0, layout.pp - 1}):
        peak = allocator_peak(shape, layout, stage=stage, autocast=layout.dtype != "fp32", fp32_logits=True,
                              optimizer_states=_states_per_param(optimizer or cfg.optimizer),
                              workspace=BLAS_WORKSPACE if mode == "gpu" else 0.0, ddp_buckets=ddp_buckets)
        mem = {k: peak[k] for k in ("params", "grads", "optimizer", "activations", "transient")}
        mem["params"] += gather if layout.zero >= 3 else 0.0
        mem["total"] = sum(mem.values())
        if best is None or mem["total"] > best["total"]:
            best = mem
    return best


def _reference_layout(cfg, layout):
    return dataclasses.replace(layout, dp=1, tp=1, pp=1, zero=0, sp=False, v=1, schedule="1f1b",
                               cp=1, tp_overlap=False,
                               micro_batch=cfg.global_batch // cfg.micro_batches,
                               num_micro_batches=cfg.micro_batches, checkpointing="none",
                               dtype="fp32", stage_layers=None)


def need(cfg, layout, workers: int, mode: str, *, parity: bool = True, strategy: str | None = None) -> dict:
    """Bytes the run needs where it is limited (`per` GPU, or this `host`'s RAM), and why.
    ``strategy``: DDP's buckets are counted where Accelerate wraps the model in torch DDP."""
    rank = rank_bytes(cfg, layout, mode=mode, ddp_buckets=strategy in DDP_WRAPPED and workers > 1)
    ref = rank_bytes(cfg, _reference_layout(cfg, layout), mode=mode) if parity else None
    if mode == "gpu":
        total = max(rank["total"], ref["total"] if ref else 0.0)
        return {"where": "per GPU", "bytes": total, "rank": rank, "reference": ref}
    weights = rank["params"] * (layout.dp if layout.zero >= 3 else 1)  # fp32, sent to the parent
    ranks = rank["total"] * workers
    total = max(ranks, ref["total"] + weights if ref else 0.0) + weights
    return {"where": "in this machine's RAM", "bytes": total, "rank": rank, "reference": ref,
            "workers": workers}


def limit(mode: str) -> tuple[float, str]:
    """(usable bytes, how they were found) for `mode`."""
    if mode == "gpu":
        sizes = [g["memory_bytes"] for g in gpu_info() if g.get("memory_bytes")]
        if not sizes:
            return float("inf"), "GPU memory unknown"
        return USABLE * min(sizes), f"{USABLE:.0%} of the smallest GPU's {min(sizes) / GB:.1f} GB"
    avail = psutil.virtual_memory().available
    return USABLE * avail, f"{USABLE:.0%} of the {avail / GB:.1f} GB of RAM available now"


def _breakdown(rank: dict) -> str:
    names = {"transient": "loss and workspaces at backward's start"}
    return ", ".join(f"{names.get(k, k)} {rank[k] / GB:.2f}"
                     for k in ("params", "grads", "optimizer", "activations", "transient"))


_CHANGES = ("rows", "checkpointing", "sgd", "no_parity", "shard")


def _changed(cfg, layout, workers, parity, mode, change, n=None):
    """(cfg, layout, workers, parity) with one change applied; `n`: rows (for "rows"), GPUs (for
    "shard" on GPUs)."""
    if change == "rows":
        cfg = cfg.replace(global_batch=cfg.global_batch * n // layout.micro_batch)
        layout = dataclasses.replace(layout, micro_batch=n)
    elif change == "checkpointing":
        layout = dataclasses.replace(layout, checkpointing="full")
    elif change == "sgd":
        cfg = cfg.replace(optimizer="sgd")
    elif change == "no_parity":
        parity = False
    elif change == "shard" and mode == "gpu":  # more GPUs, each a shard of a smaller batch
        rows = max(1, layout.micro_batch * layout.dp // n)
        layout, workers = dataclasses.replace(layout, dp=n, zero=3, micro_batch=rows), n
    elif change == "shard":  # the same CPU workers, one copy of the model between them
        layout = dataclasses.replace(layout, zero=3)
    return cfg, layout, workers, parity


def _applicable(change, cfg, layout, workers, mode, parity) -> bool:
    return {"rows": layout.micro_batch > 1, "checkpointing": layout.checkpointing != "full",
            "sgd": cfg.optimizer == "adamw", "no_parity": parity and mode != "gpu",
            "shard": layout.zero < 3 and (mode == "gpu" or workers > 1)}[change]


def fixes(cfg, layout, workers: int, mode: str, strategy: str, usable: float, *, parity: bool) -> list[str]:
    """The fewest changes that make the run fit (up to three ways), each checked with `need`;
    shape mode last, which always fits. Changes are combined (one, then pairs, …) and only the
    fitting ones returned, as the flags a refusal names. Not `lessons.planning.single_changes`,
    which tables every single change to a planner's cluster-scale layout, fitting or not."""
    def size(state):
        c, lay, w, par = state
        return (rank_bytes(c, lay)["total"] if mode == "gpu" and lay.zero == 3 and lay.dp > layout.dp
                else need(c, lay, w, mode, parity=par, strategy=strategy if lay.zero < 3 else None)["bytes"])

    def attempt(combo):
        state = (cfg, layout, workers, parity)
        words = []
        for change in combo:
            if change in ("rows", "shard") and not (change == "shard" and mode != "gpu"):
                continue  # sized below, once the other changes are in
            state = _changed(*state, mode, change)
        if "shard" in combo and mode == "gpu":
            gpus = next((n for n in (2, 4, 8, 16, 32, 64, 128, 256) if n > layout.dp
                         and size(_changed(*state, mode, "shard", n)) <= usable), None)
            if gpus is None:
                return None
            state = _changed(*state, mode, "shard", gpus)
            words.append(f"zero3 or fsdp2 over {gpus * layout.tp * layout.pp} GPUs"
                         + (f" (dp {gpus})" if layout.tp * layout.pp > 1 else ""))
        if "rows" in combo:
            rows = next((r for r in _halvings(layout.micro_batch)
                         if size(_changed(*state, mode, "rows", r)) <= usable), None)
            if rows is None:
                return None
            state = _changed(*state, mode, "rows", rows)
            words.append(f"--global-batch {state[0].global_batch}")
        if size(state) > usable:
            return None
        names = {"checkpointing": "--checkpointing full", "sgd": "--optimizer sgd",
                 "no_parity": "--no-parity (the reference is another full copy)",
                 "shard": f"zero3 or fsdp2 instead of {strategy} (one copy of the model over the "
                          f"workers, not one each)"}
        return " and ".join([names[c] for c in combo if c in names and not (c == "shard" and mode == "gpu")]
                            + words)

    usable_changes = [c for c in _CHANGES if _applicable(c, cfg, layout, workers, mode, parity)]
    found = []
    for k in range(1, len(usable_changes) + 1):
        found = [f for combo in combinations(usable_changes, k) if (f := attempt(combo))]
        if found:
            break
    return found[:3] + ["--emulate h100-nvlink --shape (fake tensors: times and memory, no bytes)"]


def _halvings(rows: int) -> list[int]:
    """rows/2, rows/4, … 1: the largest batch that fits is tried first."""
    out = []
    while rows > 1:
        rows //= 2
        out.append(rows)
    return out


def check_fits(cfg, layout, *, workers: int, mode: str, strategy: str, parity: bool = True) -> dict:
    """Raise ValueError (one sentence: the bytes, the limit, what would fit) when the run cannot
    fit; return the figures otherwise (`record["memory_check"]`)."""
    if not cfg.is_gpt:
        return check_mlp_fits(cfg, layout, workers=workers, mode=mode, parity=parity)
    got = need(cfg, layout, workers, mode, parity=parity, strategy=strategy)
    usable, how = limit(mode)
    result = {"predicted_bytes": got["bytes"], "where": got["where"], "usable_bytes": usable,
              "usable_from": how, "fits": got["bytes"] <= usable}
    if result["fits"]:
        return result
    ranks = f" × {workers} ranks" if got.get("workers", 1) > 1 else ""
    raise ValueError(
        f"{cfg.model} with {strategy} ({layout.describe()}, {cfg.optimizer}) needs "
        f"{got['bytes'] / GB:.1f} GB {got['where']} (fullest rank: {_breakdown(got['rank'])} GB"
        f"{ranks}; cost model) but has {usable / GB:.1f} GB ({how}). It would fit with: "
        + "; or ".join(fixes(cfg, layout, workers, mode, strategy, usable, parity=parity)) + ".")


def mlp_params(mc) -> int:
    """Parameters of `models.mlp.MLP` for its config: ``n_layers`` Linear layers, widths
    d_in -> d_hidden (× n_layers - 1) -> d_out, each with its bias."""
    if mc.n_layers == 1:
        return mc.d_in * mc.d_out + mc.d_out
    h = mc.d_hidden  # counted, not listed: 10^9 layers must not build a list of 10^9 widths
    return (mc.d_in * h + h) + (mc.n_layers - 2) * (h * h + h) + (h * mc.d_out + mc.d_out)


def check_mlp_fits(cfg, layout, *, workers: int, mode: str, parity: bool = True) -> dict:
    """The MLPs' memory check (`-o model_sizes` can make one of terabytes: d_hidden 10^6 is 10^12
    weights a layer; 10^9 layers were OOM-killed after 42 s): a *lower bound* — the weights,
    gradients and optimizer states alone (4 + 4 + 4 per state bytes a parameter, activations left
    out), a pipeline's share per rank — refused in one sentence when even that cannot fit."""
    params = mlp_params(cfg.model_config())
    per_param = 8 + 4 * _states_per_param(cfg.optimizer)
    rank = params * per_param / max(1, layout.pp)
    if mode == "gpu":
        total, where = rank, "per GPU"
    else:  # every rank in this machine's RAM, the reference's copy beside them, weights sent back
        total, where = rank * workers + (params * per_param if parity else 0) + 4 * params, "in this machine's RAM"
    usable, how = limit(mode)
    result = {"predicted_bytes": total, "where": where, "usable_bytes": usable, "usable_from": how,
              "fits": total <= usable, "lower_bound": True}
    if result["fits"]:
        return result
    raise ValueError(
        f"{cfg.model} with its sizes ({params:,} parameters) needs at least {total / GB:,.1f} GB {where} "
        f"for its weights, gradients and {cfg.optimizer} states alone, but has {usable / GB:.1f} GB "
        f"({how}); use smaller -o model_sizes (d_hidden, n_layers).")
