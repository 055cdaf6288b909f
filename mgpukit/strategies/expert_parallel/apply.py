"""`apply_ep`: expert parallelism applied to the unmodified MoE GPT from outside.

On an ep group of `p` ranks — consecutive data-parallel ranks, each reading its own sequences —
every MoE layer keeps `E/p` of its experts on each rank (GShard, Lepikhin et al. 2020, §2.2;
DeepSpeed-MoE, Rajbhandari et al. 2022, places the ep group inside data parallelism the same
way). The router, attention and everything else stay replicated and data-parallel:

    x ─ router ─ dispatch buffer (B, E, C, d) ─ all-to-all ─ my E/p experts on every rank's
        slots (p·B·C tokens each) ─ all-to-all ─ (B, E, C, d) ─ combine

Gradients (`ExpertParallelSync`): the dense ones averaged over every data rank, as in data
parallelism; an expert's gradient already sums the contributions of its ep group's tokens (the
backward all-to-all brought them), so it is summed over the expert's copies in the other ep
groups (the `dp_outer` axis) and divided by the number of data ranks — the same mean as one
process holding every expert computes.

Parameter names stay those of the unmodified model (the experts' stacked weights are sliced in
place along dim 0), so the gathered weights compare one to one with the single-process reference.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn

from mgpukit.models.moe import Experts, MoEFeedForward
from mgpukit.strategies.data_parallel.naive import all_reduce_gradients
from mgpukit.strategies.expert_parallel.comm import EPGroup, all_to_all
from mgpukit.training.parts import Split


class ExpertParallelExperts(Experts):
    """This rank's `E/p` experts behind the dispatch and combine all-to-alls; names unchanged."""

    def __init__(self, experts: Experts, ep: EPGroup):
        E, d, f = experts.w1.shape
        n = E // ep.size
        super().__init__(n, d, f)
        mine = slice(ep.rank * n, (ep.rank + 1) * n)
        with torch.no_grad():
            for name in ("w1", "b1", "w2", "b2"):
                getattr(self, name).copy_(getattr(experts, name)[mine])
        self.ep = ep

    def forward(self, buf):  # (B, E, C, d): every expert's slots from this rank's sequences
        B, E, C, d = buf.shape
        p, n = self.ep.size, E // self.ep.size
        x = all_to_all(buf.transpose(0, 1), self.ep)  # dispatch: block j (rank j's experts) to rank j
        x = x.reshape(p, n, B, C, d).transpose(0, 1).reshape(n, p * B * C, d)  # my experts, every rank's slots
        y = self.run(x).reshape(n, p, B, C, d).transpose(0, 1).reshape(p * n, B, C, d)
        return all_to_all(y, self.ep).transpose(0, 1)  # combine: back to their ranks, (B, E, C, d)


def expert_params(module: nn.Module) -> set[int]:
    """ids of the sliced expert weights (what `ExpertParallelExperts` holds)."""
    return {id(p) for m in module.modules() if isinstance(m, ExpertParallelExperts) for p in m.parameters()}


class ExpertParallelSync:
    """Dense gradients averaged over the dp group; expert gradients summed over their copies
    (`dp_outer`) and divided by the data ranks (module docstring)."""

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def __init__(self, rec, module, ctx):
        experts = expert_params(module)
        self.rec = rec
        self.dense = [p for p in module.parameters() if id(p) not in experts]
        self.experts = [p for p in module.parameters() if id(p) in experts]
        self.dp_group, self.n = ctx.group("dp"), ctx.size("dp")
        self.copies = ctx.group("dp_outer") if ctx.size("dp_outer") > 1 else None

    def no_sync(self):
        return contextlib.nullcontext()  # backward never communicates by itself

    def sync(self, step: int) -> None:
        all_reduce_gradients(self.rec, self.dense, group=self.dp_group)
        for p in self.experts:
            if self.copies is not None:
                self.rec.all_reduce(p.grad, group=self.copies)
            p.grad.div_(self.n)


def apply_ep_grad_sync(module, ctx, rec, cfg):
    return module, ExpertParallelSync(rec, module, ctx)


def check_ep(mcfg, ep: int) -> None:
    """The experts split evenly over the ep ranks."""
    if mcfg.n_expert % ep:
        good = [d for d in range(1, mcfg.n_expert + 1) if mcfg.n_expert % d == 0]
        raise ValueError(f"ep={ep} does not divide n_expert={mcfg.n_expert}; choose ep in {good}.")


def apply_ep(model: nn.Module, ctx, rec, cfg=None) -> Split:
    """Split every MoE layer's experts of `model` over this rank's ep group (module docstring)."""
    ep = EPGroup(rec=rec, group=ctx.group("ep"), size=ctx.size("ep"), rank=ctx.coords["ep"])
    check_ep(model.cfg, ep.size)
    layers = [b.mlp for b in model.blocks if isinstance(b.mlp, MoEFeedForward)]
    for mlp in layers:
        mlp.experts = ExpertParallelExperts(mlp.experts, ep)
    split = Split(loss=model.loss, state_dict=lambda m: gather_experts(m, ep),
                  grad_sq=lambda params: ep_grad_sq(params, expert_params(model), ep.size))
    # what this rank's router decided, summed over the run: assignments per expert per layer,
    # how many found no slot (dropped), and the imbalance
    moe = split.extra.setdefault("moe", {"load": [[0.0] * model.cfg.n_expert for _ in layers],
                                         "dropped": 0.0, "routed": 0.0, "imbalance": []})

    def count(i):
        def hook(mlp, _inputs, _out):  # the router's decisions for this rank's tokens
            if rec.shape:  # fake tensors (shape mode): no decisions to count
                return
            moe["load"][i] = [a + b for a, b in zip(moe["load"][i], mlp.load.tolist())]
            moe["dropped"] += float(mlp.dropped)
            moe["routed"] += float(mlp.load.sum())
            # load imbalance per layer: the busiest expert's assignments over the mean (1 = even)
            moe["imbalance"] = [max(row) * len(row) / max(sum(row), 1.0) for row in moe["load"]]
        return hook
    for i, mlp in enumerate(layers):
        mlp.register_forward_hook(count(i))
    return split


def ep_grad_sq(params, experts: set[int], ep: int) -> float:
    """This rank's share of Σ‖g‖² × dp: dense gradients whole (every data rank holds them),
    its experts' × ep (each expert lives on dp/ep of the dp ranks), so the trainer's mean over
    the dp ranks counts everything once."""
    total = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p.grad is not None:
            sq = p.grad.detach().double().pow(2).sum().cpu()
            total += sq * ep if id(p) in experts else sq
    return float(total)


def gather_experts(module: nn.Module, ep: EPGroup) -> dict:
    """Every parameter at full shape (experts gathered over the ep group), CPU copies, untimed."""
    experts = expert_params(module)
    out = {}
    with ep.rec.untimed():
        for name, p in module.named_parameters():
            if id(p) in experts:
                pieces = [torch.empty_like(p.data) for _ in range(ep.size)]
                dist.all_gather(pieces, p.data.contiguous(), group=ep.group)
                out[name] = torch.cat(pieces, dim=0).cpu()
            else:
                out[name] = p.detach().to("cpu", copy=True)
    return out
