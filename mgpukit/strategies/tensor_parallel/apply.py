"""`apply_tp`: Megatron-style tensor parallelism applied to the unmodified GPT from outside.

Per block (Shoeybi et al. 2019, Fig. 3), on `t` ranks:

    x ─ ln_1 ─ f ─┬ q_proj ┐                               (column: whole heads per rank)
                  ├ k_proj ┼ attention of my heads ─ o_proj ─ g ─ + x    (o_proj: row)
                  └ v_proj ┘
    x ─ ln_2 ─ f ─ fc1 ─ GELU ─ fc2 ─ g ─ + x                  (fc1: column, fc2: row)

`f` (identity forward, all-reduce backward) is put on the LayerNorm's output with a forward
hook, once for q, k and v together; `g` (all-reduce forward) is inside the row-parallel
linears. So each block costs one all-reduce per attention and one per MLP in forward, and the
same in backward. The embedding is vocabulary-parallel (its output summed with `g`), the output
layer column-parallel feeding the vocabulary-parallel cross-entropy (`loss.py`): no rank ever
holds the full logits.

With sequence parallelism (`sp=True`, Korthikanti et al. 2022) the residual stream between the
row- and column-parallel regions is split along the sequence: `f` becomes an all-gather of
the LayerNorm's output, `g` a reduce-scatter, and LayerNorm, dropout and the residual adds run
on T/t tokens. The parameters used there (LayerNorms, row-parallel biases, the position
table) then see only their rank's tokens, so their gradients are summed over the tp group
after backward (`SequenceParallelGradSync`) — one flat all-reduce per step.

Parameter names stay those of the unmodified model (the split layers replace the originals in
place), so the gathered weights compare one to one with the single-process reference.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from mgpukit.models.weights import to_device
from mgpukit.strategies.tensor_parallel.comm import (TPGroup, copy_to_tp, gather_seq, reduce_from_tp,
                                                     scatter_seq)
from mgpukit.strategies.tensor_parallel.layers import (ColumnParallelLinear, RowParallelLinear,
                                                       VocabParallelEmbedding)
from mgpukit.strategies.tensor_parallel.loss import vocab_parallel_loss
from mgpukit.training.holding import TP_SPLIT, Holding


@dataclasses.dataclass(kw_only=True)
class TensorParallel:
    """What a tensor-parallel applier hands to `parallelize` besides the rewritten model."""

    model: nn.Module
    loss: Callable  # (logits, targets) -> mean loss, on every tp rank
    state_dict: Callable[[nn.Module], dict]  # full weights (collective over tp), CPU copies
    grad_sq: Callable[[list], float]  # Σ‖g‖² of the full model's gradient held by this rank, /t if replicated
    holds_loss: bool  # counts the loss in the logs (one rank per tp group)
    wrap_sync: Callable = lambda sync: sync  # dp GradSync -> GradSync (+ tp reduction of SP grads)
    around: Callable | None = None  # context entered around forward + backward (torch's loss_parallel)
    # what this rank holds, for checkpoints: our split parameters are slices (tp-split);
    # DTensor's are DTensors, whose shards DCP knows (replicated, as far as we are concerned)
    holding: Holding = dataclasses.field(default_factory=Holding)


class _Embedding(nn.Module):
    """Token embedding split by vocabulary, position embedding replicated; names unchanged."""

    def __init__(self, embed: nn.Module, tp: TPGroup, sp: bool):
        super().__init__()
        self.tok = VocabParallelEmbedding(embed.tok, tp)
        self.pos, self.drop = embed.pos, embed.drop
        self.tp, self.sp = tp, sp

    def forward(self, idx):
        T = idx.shape[1]
        partial = self.tok(idx)  # (B, T, C): my vocabulary rows, zeros elsewhere
        if not self.sp:
            pos = torch.arange(T, device=idx.device)
            return self.drop(reduce_from_tp(partial, self.tp) + self.pos(pos))
        n = T // self.tp.size
        pos = torch.arange(self.tp.rank * n, (self.tp.rank + 1) * n, device=idx.device)
        return self.drop(scatter_seq(partial, self.tp) + self.pos(pos))  # (B, T/t, C)


def _entering_columns(tp: TPGroup, sp: bool):
    """Forward hook on a LayerNorm whose output feeds column-parallel linears."""
    def hook(_module, _inputs, out):
        return gather_seq(out, tp) if sp else copy_to_tp(out, tp)
    return hook


def apply_tp(model: nn.Module, ctx, rec, *, sp: bool = False) -> TensorParallel:
    """Split `model` (a `GPT`) in place over `ctx.group("tp")` (module docstring)."""
    tp = TPGroup(rec=rec, ctx=ctx)
    check_divides(model.cfg, tp.size, sp=sp)
    model.embed = _Embedding(model.embed, tp, sp)
    for block in model.blocks:
        split_block(block, tp, sp=sp)
    model.head.ln_f.register_forward_hook(_entering_columns(tp, sp))
    model.head.lm_head = ColumnParallelLinear(model.head.lm_head, tp)
    to_device(model, ctx.device)
    return TensorParallel(
        model=model, loss=vocab_parallel_loss(tp, start=model.head.lm_head.weight.shape[0] * tp.rank),
        state_dict=lambda m: gather_full_state(m, tp), grad_sq=lambda params: tp_grad_sq(params, tp.size),
        holds_loss=tp.rank == 0,
        wrap_sync=(lambda sync: SequenceParallelGradSync(sync, tp, model)) if sp else (lambda sync: sync),
        holding=Holding(kind=TP_SPLIT, split_dim=split_dim, tp=tp))


def split_block(block: nn.Module, tp: TPGroup, *, sp: bool = False) -> nn.Module:
    """One transformer block split in place: attention by heads, the MLP column-then-row."""
    attn, mlp = block.attn, block.mlp
    block.ln_1.register_forward_hook(_entering_columns(tp, sp))
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(attn, name, ColumnParallelLinear(getattr(attn, name), tp))
    attn.o_proj = RowParallelLinear(attn.o_proj, tp, sequence_parallel=sp)
    block.ln_2.register_forward_hook(_entering_columns(tp, sp))
    mlp.fc1 = ColumnParallelLinear(mlp.fc1, tp)
    mlp.fc2 = RowParallelLinear(mlp.fc2, tp, sequence_parallel=sp)
    return block


def check_divides(cfg, t: int, *, sp: bool) -> None:
    """Whole heads, whole MLP columns and whole vocabulary rows per rank (and tokens with SP)."""
    sizes = {"n_head": cfg.n_head, "d_ff": cfg.d_ff, "vocab_size": cfg.vocab_size}
    if sp:
        sizes["seq_len"] = cfg.seq_len
    for name, size in sizes.items():
        if size % t:
            good = [d for d in range(1, size + 1) if size % d == 0]
            raise ValueError(f"tp={t} does not divide {name}={size}; choose tp in {good}.")


def split_dim(p) -> int | None:
    """The dimension our split layers cut `p` along (`layers.py` marks it), None if replicated."""
    return getattr(p, "tp_dim", None)


def is_split(p) -> bool:
    return split_dim(p) is not None


def tp_grad_sq(params, t: int) -> float:
    """This rank's share of ‖g‖² of the full model: split gradients whole, replicated ones /t
    (every tp rank holds the same copy), so summing over the tp group counts each once."""
    total = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p.grad is not None:
            sq = p.grad.detach().double().pow(2).sum().cpu()
            total += sq if is_split(p) else sq / t
    return float(total)


def gather_full_state(module: nn.Module, tp: TPGroup) -> dict:
    """Every parameter at full shape, on every tp rank (untimed bookkeeping), as CPU copies."""
    inner = module.module if isinstance(module, DistributedDataParallel) else module  # DDP-wrapped: its model
    out = {}
    with tp.rec.untimed():
        for name, p in inner.named_parameters():
            if is_split(p):
                pieces = [torch.empty_like(p.data) for _ in range(tp.size)]
                dist.all_gather(pieces, p.data.contiguous(), group=tp.group)
                out[name] = torch.cat(pieces, dim=p.tp_dim).cpu()
            else:
                out[name] = p.detach().to("cpu", copy=True)
    return out


class SequenceParallelGradSync:
    """The dp sync, then the gradients of the sequence-parallel region's replicated parameters
    summed over the tp group (each rank saw only its T/t tokens), in one flat all-reduce."""

    def __init__(self, inner, tp: TPGroup, model: nn.Module):
        self.inner, self.tp = inner, tp
        self.params = [p for p in model.parameters() if not is_split(p)]

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return self.inner.no_sync()

    def sync(self, step: int) -> None:
        self.inner.sync(step)
        grads = [p.grad for p in self.params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.tp.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
