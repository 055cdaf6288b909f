"""`local-sgd`: H optimizer steps on each rank alone, then one average of the weights.

Delayed updates. Data parallelism all-reduces the gradient every step; local SGD lets each
rank take `H` steps on its own slice of the data with its own copy of the weights, and only
then averages the *weights* over the data-parallel group (Zhang et al. 2016, "Parallel SGD:
When does averaging help?"; Stich 2019, "Local SGD Converges Fast and Communicates Little";
Lin et al. 2020, "Don't Use Large Mini-Batches, Use Local SGD"):

    step s:   w_r ← w_r − lr · u(g_r)                     every rank alone, no communication
    if (s+1) % H == 0 or s is the last step:
              w_r ← (1/n) Σ_r' w_r'                       one all-reduce of Ψ bytes

So the bytes per step drop H-fold: one all-reduce of the weights every H steps instead of one
of the gradients every step (the same Ψ bytes each time). What it costs: between averages the
replicas drift apart, so the averaged model is not the one synchronous SGD would reach — the
loss per step is a little worse, more so the larger H and the learning rate.

**H = 1 is data parallelism exactly, for a linear optimizer.** SGD with momentum updates
`m ← μ·m + g; w ← w − lr·m`: linear in (w, m, g). Averaging the weights after each rank's
step then gives `w̄ − lr·(μ·m̄ + ḡ)`, and the mean of the ranks' (un-averaged) momentum
buffers evolves as `m̄ ← μ·m̄ + ḡ` — DDP's update with the averaged gradient. Adam divides by
`sqrt(v)`, which is not linear in g: there H = 1 is *not* DDP. (tests/test_local_sgd.py checks
the SGD case, the kit's default optimizer, at torch's fp32 tolerances.)

Two implementations behind one knob, `impl`:

- `"ours"`: gradients never leave the rank (`sync` does nothing); `after_step` averages each
  parameter with the recorder's all-reduce every H steps and after the last step.
- `"accelerate"`: Accelerate's own `accelerate.local_sgd.LocalSGD` around a DDP model: its
  context keeps DDP in `no_sync` (no gradient all-reduce), `local_sgd.step()` after each
  optimizer step averages every H steps with `accelerator.reduce(param.data, "mean")`, and
  leaving the context averages once more. Its collectives are counted by `CommObserver`.
  Accelerate's own recipe averages on exit even when step() just did: one extra average.

Collectives: none in forward or backward; every H steps one all-reduce of the weights (one
flat buffer), over the dp group. The logged gradient norm is each rank's *local* gradient's
(root mean square over ranks), never an averaged one: parity compares losses and weights.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from mgpukit.measure.observe import CommObserver
from mgpukit.strategies.compression.parity import loss_parity
from mgpukit.strategies.data_parallel.ddp import apply_ddp
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.registry import register

FP32_TOL = {"rtol": 1.3e-6, "atol": 1e-5}  # torch.testing.assert_close, float32
LOSS_RTOL = 0.05  # H > 1: final loss within 5 % of synchronous SGD's (a different algorithm)


def average_weights(rec, params, *, group) -> None:
    """Every parameter replaced by its mean over `group`: packed into one flat buffer (one
    all-reduce, as DDP's bucket — per-tensor messages would pay the latency α dozens of
    times), summed, divided by n, unpacked."""
    n = dist.get_world_size(group)
    params = list(params)
    with torch.no_grad():
        with rec.compute("pack"):
            flat = _flatten_dense_tensors([p.data for p in params])  # (Ψ,)
        rec.all_reduce(flat, group=group)
        with rec.compute("pack"):
            flat.div_(n)
            for p, avg in zip(params, _unflatten_dense_tensors(flat, [p.data for p in params])):
                p.data.copy_(avg)


class LocalSgdSync:
    """Gradients stay on their rank; weights are averaged every `H` steps (module docstring)."""

    def __init__(self, rec, module, *, group, local_steps: int, steps: int):
        self.rec, self.module, self.group = rec, module, group
        self.H, self.steps = local_steps, steps
        self.averages = 0

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)

    def no_sync(self):
        return contextlib.nullcontext()  # backward never communicates

    def sync(self, step: int) -> None:
        pass  # each rank steps on its own gradient

    def due(self, step: int) -> bool:
        return (step + 1) % self.H == 0 or step == self.steps - 1

    def after_step(self, step: int) -> None:
        if self.due(step):
            average_weights(self.rec, self.module.parameters(), group=self.group)
            self.averages += 1

    def sharded_parts(self, parts):
        """The seam after the optimizer step (`Parts.after_step`) is where the weights meet."""
        parts.after_step = self.after_step
        parts.extra["local_sgd"] = {"H": self.H, "impl": "ours"}
        return parts


class AccelerateLocalSgdSync:
    """Accelerate's `LocalSGD` around its DDP model: entered once, stepped after each optimizer
    step, left after the last one (which averages once more, as its context manager does)."""

    def __init__(self, rec, accelerator, model, *, local_steps: int, steps: int):
        # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
        from accelerate.local_sgd import LocalSGD

        self.rec, self.steps, self.H = rec, steps, local_steps
        self.observer = lambda: CommObserver(rec)  # Accelerate calls torch.distributed itself
        self.local = LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_steps)
        self.local.__enter__()  # DDP's no_sync for the whole run: no gradient all-reduce

    frees_grads = False  # the trainer zeroes .grad in place between steps (`training.parts`)

    def no_sync(self):
        return contextlib.nullcontext()  # already inside LocalSGD's no_sync

    def sync(self, step: int) -> None:
        self.rec.wait_all()

    def after_step(self, step: int) -> None:
        with self.observer():
            self.local.step()
            if step == self.steps - 1:
                self.local.__exit__(None, None, None)

    def sharded_parts(self, parts):
        parts.after_step = self.after_step
        parts.extra["local_sgd"] = {"H": self.H, "impl": "accelerate"}
        return parts


def apply_local_sgd(module, ctx, rec, cfg):
    """The applier: `module` unchanged (ours) or DDP-wrapped by Accelerate (accelerate)."""
    H, impl = STRATEGY.option(cfg, "local_steps"), STRATEGY.option(cfg, "impl")
    if impl == "accelerate":
        model, ddp_sync = apply_ddp(module, ctx, rec, cfg)
        return model, AccelerateLocalSgdSync(rec, ddp_sync.accelerator, model, local_steps=H,
                                             steps=cfg.steps)
    return module, LocalSgdSync(rec, module, group=ctx.group("dp"), local_steps=H, steps=cfg.steps)


def local_sgd_compare(record: dict, weights, ref: dict, tol) -> dict:
    """H = 1: losses and final weights elementwise at torch's fp32 tolerances (the gradient
    norms logged are local ones, see the module docstring). H > 1: the loss curve, final loss
    within `LOSS_RTOL` of synchronous SGD's."""
    H = (record["config"].get("options") or {}).get("local_steps", STRATEGY_DEFAULT_H)
    if H > 1:
        return loss_parity(record, ref["record"], rtol=(tol or {}).get("rtol", LOSS_RTOL))
    tol = tol or FP32_TOL
    ok, out = True, {"reference": ref["record"]["strategy"], "tolerance": dict(tol),
                     "method": "losses and final weights elementwise (gradient norms are local)"}
    pairs = {"losses": [(torch.tensor(record["losses"], dtype=torch.float64),
                         torch.tensor(ref["record"]["losses"], dtype=torch.float64))]}
    if weights is not None:
        pairs["weights"] = [(weights[k].double(), w.double()) for k, w in ref["weights"].items()]
    for name, items in pairs.items():
        worst = 0.0
        for got, want in items:
            if got.shape != want.shape:
                ok, worst = False, math.inf
                continue
            diff = (got - want).abs()
            worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
            ok &= bool(torch.all(diff <= tol["atol"] + tol["rtol"] * want.abs()))
        out[f"{name}_max_abs_diff"] = worst
    out["weights_checked"] = weights is not None
    out["max_abs_diff"] = max(v for k, v in out.items() if k.endswith("_max_abs_diff"))
    out["ok"] = bool(ok)
    return out


def local_sgd_theory(cfg, dims) -> dict:
    """Bytes per step: DDP's all-reduce of Ψ, once every H steps (averaged over a run of
    `cfg.steps` steps, counting the final average)."""
    out = dp_theory(cfg, dims)
    H = (cfg.options or {}).get("local_steps", STRATEGY_DEFAULT_H)
    averages = len([s for s in range(cfg.steps) if (s + 1) % H == 0 or s == cfg.steps - 1])
    out["comm_bytes"] = out["comm_bytes"] * averages / cfg.steps
    out["averages"] = averages
    return out


def _validate(cfg, dims) -> None:
    if (cfg.options or {}).get("impl") == "accelerate" and dims.dp != dims.world_size:
        raise ValueError("local-sgd impl=accelerate wraps the whole launched group (Accelerate's "
                         "DDP); use impl=ours to combine local SGD with other axes.")


STRATEGY_DEFAULT_H = 4
STRATEGY = register(
    "local-sgd", family="data-parallel",
    description="H local SGD steps per rank, then one average of the weights (H-fold fewer bytes)",
    grad_sync=apply_local_sgd, compare=local_sgd_compare, theory=local_sgd_theory,
    validate=_validate, composes=("dp",),
    knobs=(Knob("local_steps", int, STRATEGY_DEFAULT_H, "H: optimizer steps between weight averages",
                minimum=1),
           Knob("impl", str, "ours", "'ours' (recorder all-reduce) or 'accelerate' (accelerate.local_sgd.LocalSGD)",
                choices=("ours", "accelerate"))))
