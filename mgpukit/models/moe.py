"""A mixture-of-experts GPT: the tiny GPT with every MLP replaced by routed experts.

Each block's feed-forward becomes `MoEFeedForward` (Shazeer et al. 2017; GShard, Lepikhin et
al. 2020; Switch Transformer, Fedus et al. 2021):

    x (B, T, C) ─ router ─ top-k experts per token, gates renormalised over the k (GShard)
                ─ dispatch: each expert gets at most C slots per sequence, first choices
                  first, then second choices (GShard §2.2); the rest are *dropped* (their
                  MLP output is 0: the residual carries them, as in Switch)
                ─ experts (E, slots, C) ─ combine: Σ gate · expert output ─ (B, T, C)

Capacity is counted per sequence — each sequence is one of GShard's "groups" — so which
tokens are dropped does not depend on how sequences are spread over ranks: a run that splits
the experts (expert parallelism) routes exactly as one process does.

The auxiliary load-balancing loss (Switch eq. 4, per sequence, then averaged):
`coef · E · Σ_e f_e · P_e`, with `f_e` the fraction of the sequence's k·T assignments routed
to expert e and `P_e` the mean router probability of e. It is added to the gradient, not to
the logged loss, with Megatron-Core's `MoEAuxLossAutoScaler` trick: an identity on the layer's
output whose backward also hands the aux loss a gradient of `1` — so the training loop and
the loss function stay those of the dense GPT.

`experts` is its own module taking the dispatched buffer `(B, E, C, d)` and returning one of
the same shape: expert parallelism replaces it from outside (`strategies.expert_parallel`).
No parallelism lives here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from mgpukit.costmodel.cp_ep import expert_capacity
from mgpukit.models.gpt import GPT, GPTConfig, gpt_tiny


@dataclass(frozen=True, kw_only=True)
class MoEConfig(GPTConfig):
    """A GPT whose MLPs are `n_expert` experts of width `d_ff`, `top_k` of them per token."""

    n_expert: int = 8
    top_k: int = 2
    capacity_factor: float = 1.25  # slots per expert = ⌈factor · top_k · T / n_expert⌉
    aux_loss_coef: float = 0.01  # Switch's α

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_expert < 1 or not 1 <= self.top_k <= self.n_expert:
            raise ValueError(f"top_k={self.top_k} must be between 1 and n_expert={self.n_expert}")
        if self.capacity_factor <= 0:
            raise ValueError(f"capacity_factor={self.capacity_factor} must be > 0 (1.25 is Switch's)")

    @property
    def capacity(self) -> int:
        return expert_capacity(self.seq_len, self.n_expert, self.top_k, self.capacity_factor)


def gpt_moe(**overrides) -> MoEConfig:
    """gpt-tiny's attention with 8 experts of width 128 per block, top-2 (~0.6 M parameters)."""
    base = {k: getattr(gpt_tiny(), k) for k in ("vocab_size", "seq_len", "n_layer", "n_head", "d_model")}
    return MoEConfig(**{**base, "d_ff": 128, **overrides})


def mixtral_8x7b(**overrides) -> MoEConfig:
    """Mixtral 8×7B's sizes (Jiang et al. 2024: 32 layers, d 4096, 32 heads, 8 experts of
    width 14336, top-2, vocab 32000) on this GPT's blocks: LayerNorm, learned positions, GELU
    experts 1.5 × 14336 = 21504 wide (two matrices holding as many weights as SwiGLU's three,
    as `llama_7b` does), 4096 context, biases only in the experts; Switch's capacity factor 1.25 (Mixtral drops
    nothing). ~46 B parameters here. For shape mode (fake tensors)."""
    kw = dict(vocab_size=32000, seq_len=4096, n_layer=32, n_head=32, d_model=4096, d_ff=21504,
              bias=False, n_expert=8, top_k=2)
    return MoEConfig(**{**kw, **overrides})


class Experts(nn.Module):
    """`E` two-layer GELU MLPs as stacked weights, run as batched matmuls; the number of
    experts is read from the weights, so a rank holding a slice runs it unchanged."""

    def __init__(self, n_expert: int, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n_expert, d_model, d_ff))
        self.b1 = nn.Parameter(torch.zeros(n_expert, d_ff))
        self.w2 = nn.Parameter(torch.empty(n_expert, d_ff, d_model))
        self.b2 = nn.Parameter(torch.zeros(n_expert, d_model))

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """x (E_held, N, d) -> (E_held, N, d): expert e on row block e."""
        h = F.gelu(torch.baddbmm(self.b1.unsqueeze(1), x, self.w1))  # (E, N, d_ff)
        return torch.baddbmm(self.b2.unsqueeze(1), h, self.w2)  # (E, N, d)

    def forward(self, buf: torch.Tensor) -> torch.Tensor:
        """buf (B, E, C, d) dispatched slots -> (B, E, C, d) expert outputs."""
        B, E, C, d = buf.shape
        x = buf.transpose(0, 1).reshape(E, B * C, d)  # (E, B·C, d)
        return self.run(x).reshape(E, B, C, d).transpose(0, 1)


class _AuxLoss(torch.autograd.Function):
    """Identity on `out`; backward also gives `aux` a gradient of 1 (Megatron-Core's
    `MoEAuxLossAutoScaler`): the aux loss is trained without being returned."""

    @staticmethod
    def forward(ctx, out, aux):
        ctx.save_for_backward(aux)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.ones_like(aux)


class MoEFeedForward(nn.Module):
    """Router -> capacity-limited dispatch -> experts -> gated combine (module docstring).

    After each forward, `load` holds the assignments routed to each expert (E,) and
    `dropped` how many of them found no slot — plain tensors, for whoever measures."""

    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.d_model, cfg.n_expert, bias=False)
        self.experts = Experts(cfg.n_expert, cfg.d_model, cfg.d_ff)
        self.load = torch.zeros(cfg.n_expert)
        self.dropped = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        B, T, d = x.shape
        E, k, C = cfg.n_expert, cfg.top_k, cfg.capacity
        probs = torch.softmax(self.router(x), dim=-1)  # (B, T, E)
        top_p, top_e = probs.topk(k, dim=-1)  # (B, T, k)
        gates = top_p / top_p.sum(-1, keepdim=True)
        # choice-major order: every token's first choice, then every second choice (GShard)
        e = top_e.transpose(1, 2).reshape(B, k * T)  # (B, kT): expert of each assignment
        onehot = F.one_hot(e, E)  # (B, kT, E)
        pos = ((onehot.cumsum(1) - 1) * onehot).sum(-1)  # (B, kT): its place in its expert's queue
        keep = pos < C
        slot = torch.where(keep, e * C + pos, torch.full_like(e, E * C))  # dropped: a spare slot
        token = x.unsqueeze(1).expand(B, k, T, d).reshape(B, k * T, d)
        buf = x.new_zeros(B, E * C + 1, d).scatter(1, slot.unsqueeze(-1).expand(-1, -1, d), token)
        y = self.experts(buf[:, :-1].reshape(B, E, C, d)).reshape(B, E * C, d)
        y = torch.cat((y, y.new_zeros(B, 1, d)), dim=1)  # the spare slot's output is 0
        w = gates.transpose(1, 2).reshape(B, k * T) * keep  # (B, kT)
        out = (y.gather(1, slot.unsqueeze(-1).expand(-1, -1, d)) * w.unsqueeze(-1))
        out = out.reshape(B, k, T, d).sum(1)  # (B, T, d)
        with torch.no_grad():
            self.load = onehot.sum((0, 1)).to(torch.float32)
            self.dropped = (~keep).sum().to(torch.float32)
        if self.training and cfg.aux_loss_coef:
            f = onehot.sum(1).to(probs.dtype) / (k * T)  # (B, E): fraction routed to each expert
            aux = cfg.aux_loss_coef * E * (f * probs.mean(1)).sum(-1).mean()
            out = _AuxLoss.apply(out, aux)
        return out


class MoEGPT(GPT):
    """The GPT with `MoEFeedForward` in every block (same seeded init for the shared parts)."""

    def __init__(self, cfg: MoEConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed=seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            for block in self.blocks:
                block.mlp = MoEFeedForward(cfg)
                nn.init.normal_(block.mlp.router.weight, mean=0.0, std=0.02)
                nn.init.normal_(block.mlp.experts.w1, mean=0.0, std=0.02)
                nn.init.normal_(block.mlp.experts.w2, mean=0.0, std=0.02 / (2 * cfg.n_layer) ** 0.5)
