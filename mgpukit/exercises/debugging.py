"""Debugging exercises: three variants of a strategy, one broken on purpose, run under the
labels A, B, C. The reader reads their parity reports (losses, gradient norms, weights against
the single-process reference, and the bytes each rank sent) and names the *mechanism* of the bug
among four suspects (`suspects.py`) — not the row's letter, which the largest Δ of a column can
give away.

The bugs are ones people write: a hand-written sync that all-reduces only the `nn.Linear` and
`nn.Embedding` tensors (the LayerNorms never synced), one tensor never synced, rank 0's gradient
broadcast instead of the ranks' gradients averaged, an int8 all-reduce whose ranks never agree on
their scales, a micro-batch loss backpropagated without its 1/m (the logged loss still the mean).
Beside each bug sits a variant that misses fp32 parity for a legitimate reason — its gradients
exchanged in bf16, only the 1 % largest gradient entries sent (top-k with error
feedback), its micro-batch losses summed instead of averaged (logged as the sum and trained on
it) — farther from the reference than the bug in most difference columns, or as far, so
"the biggest number" is not the bug. The reader has to read *how* the rows differ (which column,
the bytes, a factor) to tell the suspects apart. Each variant is a gradient sync
(or a pipeline worker) registered only while its runs last, so it never shows in `mgpukit list`,
the tour or the exported script; forked workers inherit the registry.
"""
from __future__ import annotations

import contextlib
from functools import partial

import torch
import torch.distributed as dist

from mgpukit.config import RunConfig
from mgpukit.experiment import run
from mgpukit.strategies.compression import int8
from mgpukit.strategies.compression.common import compressed_sync
from mgpukit.strategies import registry
from mgpukit.strategies.pipeline.engine import apply_pipeline
from mgpukit.strategies.pipeline.pipeline_parallel import PARITY_TOLERANCE, pipeline_layout
from mgpukit.training.building import build_model, build_optimizer, loss_fn
from mgpukit.training.trainer import train


def _unsynced(bug: str | None, index: int, name: str) -> bool:
    """Does variant `bug` leave parameter `index` (`name`) out of its all-reduce?"""
    # one tensor never synced: the first block's MLP up-projection (01; not a tensor 00's quiz sizes)
    return ((bug == "skip_mlp" and name == "blocks.0.mlp.fc1.weight")
            # a sync written over the Linear and Embedding modules: the LayerNorms never synced
            or (bug == "skip_layernorm" and ".ln" in f".{name}"))


class _Sync:
    """Data-parallel gradient sync with a switchable bug (`bug=None`: correct)."""

    def __init__(self, rec, named_params, group, n: int, bug: str | None):
        named = list(named_params)
        self.rec, self.group, self.n, self.bug = rec, group, n, bug
        self.params, self.names = [p for _, p in named], [name for name, _ in named]
        self.ranks = dist.get_process_group_ranks(group) if group is not None else list(range(n))

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)
    sharded_parts = None  # the optimizer steps the full parameters (`GradSync`)

    def no_sync(self):
        return contextlib.nullcontext()

    def sync(self, step):
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if _unsynced(self.bug, i, self.names[i]):
                continue
            if self.bug in ("fp16", "bf16"):  # correct, but the exchange rounds to 16 bits
                g = (p.grad / self.n).to(torch.float16 if self.bug == "fp16" else torch.bfloat16)
                self.rec.all_reduce(g, group=self.group)
                p.grad.copy_(g.float())
                continue
            if self.bug == "broadcast":  # every rank takes rank 0's half-batch gradient
                self.rec.broadcast(p.grad, src=self.ranks[0], group=self.group)
                continue
            self.rec.all_reduce(p.grad, group=self.group)
            p.grad.div_(self.n)


def _sync_with(bug: str | None):
    def apply(module, ctx, rec, cfg):
        return module, _Sync(rec, module.named_parameters(), ctx.group("dp"), ctx.size("dp"), bug)
    return apply


def _int8_unshared_scales(flat: torch.Tensor, rec, *, chunk: int, group) -> torch.Tensor:
    """The bug: `dp-int8`'s all-reduce exchange without its MAX all-reduce of the scales. Each
    rank quantizes with its own per-chunk scales, the int8 codes are summed, and each rank
    decodes the sum with its own scales — codes made at different scales added as if they
    were one, and the ranks' "mean" gradients no longer even agree."""
    n, numel = dist.get_world_size(group), flat.numel()
    levels = 127 // n
    x = int8.chunked(flat, chunk)
    scale = int8.scales_for(x.abs().amax(dim=1), levels)  # never agreed across ranks
    codes = int8.quantize(x, scale, levels)
    rec.all_reduce(codes, group=group)
    return (codes.float() * scale[:, None]).view(-1)[:numel] / n


def _int8_bug(_):
    def build(params, rec, group, cfg):
        return partial(_int8_unshared_scales, rec=rec, chunk=1024, group=group)
    return {"grad_sync": compressed_sync(build)}, {}


def _unscaled_backward(loss: torch.Tensor, m: int) -> torch.Tensor:
    """The loss's value, with m times its gradient: what a loop that logs `loss / m` but calls
    `loss.backward()` on the unscaled micro-batch loss computes."""
    return loss + (m - 1) * (loss - loss.detach())


def _pipeline_worker(variant: str | None):
    def worker(ctx, rec, cfg):
        m = ctx.layout.num_micro_batches
        base = loss_fn(cfg)
        fn = base
        if variant == "unscaled":  # the bug: the mean is logged, the sum's gradient is applied
            fn = (lambda out, y: _unscaled_backward(base(out, y), m))
        if variant == "sum":  # legitimate: the loss is the sum over micro-batches, logged and trained
            fn = (lambda out, y: m * base(out, y))
        parts = apply_pipeline(ctx, rec, build_model(cfg), ctx.layout, fn)
        return {"weights": train(ctx, rec, cfg, parts, build_optimizer(cfg, parts.params, ctx))}
    return worker


# exercise -> variants A, B, C: (bug, registry fields, run overrides)
def _dp(bug):
    return {"grad_sync": _sync_with(bug)}, {}


def _compressed(name):
    """A registered compressor run as a variant: legitimately far from the reference, by design."""
    strat = registry.get(name)
    return {"grad_sync": strat.grad_sync, "knobs": strat.knobs}, {}


# 04 trains with AdamW (lr 1e-3), as most pipelined models are: its step divides each gradient by
# its own running scale, which is what makes an m-times-too-large gradient hard to see
PP_OPTIMIZER = {"optimizer": "adamw", "lr": 1e-3}


def _pp(variant):
    worker = _pipeline_worker(variant)
    return ({"layout": pipeline_layout("1f1b"), "schedule": "1f1b", "worker": worker},
            {"tolerance": PARITY_TOLERANCE, **PP_OPTIMIZER})


# exercise -> (label, variant, kind): one bug, one legitimate difference, one exact copy
MYSTERIES = {
    "00": (("A", None, _dp), ("B", "skip_layernorm", _dp), ("C", "bf16", _dp)),
    "01": (("A", "skip_mlp", _dp), ("B", "dp-topk", _compressed), ("C", None, _dp)),
    "02": (("A", None, _dp), ("B", "dp-topk", _compressed), ("C", "broadcast", _dp)),
    "03": (("A", "dp-topk", _compressed), ("B", None, _dp), ("C", "int8-unshared-scales", _int8_bug)),
    "04": (("A", "sum", _pp), ("B", "unscaled", _pp), ("C", None, _pp)),
}
_BROKEN = {"00": "B", "01": "A", "02": "C", "03": "C", "04": "B"}


def broken_label(name: str) -> str:
    return _BROKEN[name]


def unsynced_numel(name: str, cfg: RunConfig | None = None) -> int:
    """Parameters the broken variant of quiz `name` never all-reduces (0 if its bug is another)."""
    (bug,) = [arg for letter, arg, _ in MYSTERIES[name] if letter == _BROKEN[name]]
    model = build_model(cfg or RunConfig())
    return sum(p.numel() for i, (n, p) in enumerate(model.named_parameters()) if _unsynced(bug, i, n))


@contextlib.contextmanager
def _registered(strategies: dict):
    added = []
    try:
        for name, fields in strategies.items():
            registry._REGISTRY[name] = registry.Strategy(name=name, family="exercise",
                                                         description="a debugging exercise", **fields)
            added.append(name)
        yield
    finally:
        for name in added:
            registry._REGISTRY.pop(name, None)


def mystery_runs(name: str, *, workers: int = 2, steps: int = 3, **overrides) -> dict:
    """Records of exercise `name`'s variants, keyed and labelled "variant A" … (their strategy
    names say nothing about the bug)."""
    if name not in MYSTERIES:
        raise KeyError(f"no debugging exercise {name!r}; known: {', '.join(MYSTERIES)}")
    out = {}
    for letter, arg, kind in MYSTERIES[name]:
        fields, run_kw = kind(arg)
        label = f"variant {letter}"
        key = f"mystery-{name}-{letter.lower()}"
        with _registered({key: fields}):
            rec = run(key, workers=workers, steps=steps, mode="cpu", **run_kw, **overrides)
        out[label] = {**rec, "strategy": label, "label": label}
    return out


def parity_report(records: dict) -> str:
    """One line per variant: parity verdict, the three differences, bytes counted per rank and
    step (each collective's tensor × its per-rank bus factor, as the recorder counts them)."""
    lines = [f"{'':10} {'parity':>7} {'losses Δ':>10} {'grad norms Δ':>13} {'weights Δ':>10} "
             f"{'counted / rank / step':>21}"]
    for label, rec in records.items():
        p = rec["parity"]
        steps = max(len(rec.get("losses") or []), 1)
        sent = rec["comm"]["0"]["bytes_sent"] / steps
        lines.append(f"{label:10} {str(p['ok']):>7} {p['losses_max_abs_diff']:>10.1e} "
                     f"{p['grad_norms_max_abs_diff']:>13.1e} {p['weights_max_abs_diff']:>10.1e} "
                     f"{sent:>19,.0f} B")
    return "\n".join(lines)


__all__ = ["mystery_runs", "parity_report", "broken_label", "unsynced_numel", "MYSTERIES"]
