"""Parameter server: rank 0 holds the weights and the optimizer; ranks 1..n-1 compute gradients.

The design before all-reduce took over (Dean et al. 2012, "Large Scale Distributed Deep
Networks" — DistBelief's Downpour SGD; Li et al. 2014, "Scaling Distributed Machine Learning
with the Parameter Server", OSDI). Each worker computes a gradient on its slice of the batch,
**pushes** it to the server (send) and **pulls** the new weights (recv). There is no collective:
every message goes through the server, whose link carries ``2(n-1)·Ψ`` values per step while
a worker's carries ``2Ψ`` — the bottleneck ring all-reduce removes (``2(n-1)/n·Ψ`` on every link).

``ps-sync``
    The server waits for every worker's gradient, averages them, steps and sends the new
    weights back. With the global batch split evenly over the ``n-1`` workers this is exactly
    single-process training on the combined batch (parity with `single`). Everyone waits for
    the slowest worker; the server idles while workers compute, workers idle while it steps.

``ps-async`` (knob ``cfg.options["staleness"]`` = s, default ``n-2``)
    The server applies each gradient on its own — no barrier — so a gradient may have been
    computed on weights that are already several updates old: its *staleness* (server version
    when applied minus version it was computed on). Bounded staleness (Ho et al. 2013, "More
    effective distributed ML via a stale synchronous parallel parameter server"; Li et al.'s
    "bounded delay") caps it at ``s``.

    gloo cannot receive "from whoever sends first" (``recv`` with ``src=None`` is not supported
    for every case), so this server fixes the order instead: update ``u`` is the gradient of
    worker ``1 + u mod (n-1)`` (round-robin), and the weights that gradient is computed on are
    sent when the server reaches version ``max(0, u - s)`` — right after applying update
    ``u-s-1``. The staleness of update ``u`` is therefore exactly ``min(u, s)``, never more,
    and every message has a known source and destination. ``s = n-2`` is classic asynchronous
    SGD: a worker gets fresh weights as soon as its own gradient is applied and never waits for
    the others. ``s < n-2`` holds workers back (``s = 0`` is sequential SGD: one worker busy at
    a time). ``s > n-2`` is refused: with one gradient in flight per worker there are at most
    ``n-1`` in flight, so more staleness buys no more parallelism. The price of a fixed order is
    head-of-line blocking: a slow worker stalls the server even when others have finished —
    a real parameter server serves whoever arrives first.

    Each gradient is applied scaled by ``1/(n-1)``, so one *round* of ``n-1`` updates (one
    ``cfg.steps`` step, the same global batch as one synchronous step) moves the weights about
    as far as one synchronous step.

Measured: the staleness of every update goes to ``record["extra"]["0"]["staleness"]`` (all 0
for ``ps-sync``); the time each rank's compute stream sat waiting on a message to
``record["extra"][rank]["idle_s"]`` (a list, one entry per step) and to "idle" bars on the
timeline. The global batch is split over the ``n-1`` workers, so it must divide by ``n-1``
(and, for the experiment runner's own check, by ``n``: 3 ranks want a multiple of 6).

Both send a gradient buffer ``[grads…, loss, version]`` and a weights buffer
``[weights…, version]``: a few bytes of bookkeeping ride with the data instead of paying an
extra message's latency.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from mgpukit.costmodel.layout import Layout
from mgpukit.measure.memory import ActivationMeter, memory_breakdown
from mgpukit.models.weights import full_state_dict
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.registry import register
from mgpukit.training.building import Batches, build_model, build_optimizer, count_params, grad_sq_norm, loss_fn
from mgpukit.training.finite import check_finite

SERVER = 0


# ---------------------------------------------------------------- buffers


def pack_grads(params, loss: float, version: float, out: torch.Tensor) -> torch.Tensor:
    """Gradients, loss and the version the weights had, in one flat buffer (one message)."""
    torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params],
              out=out[:-2])
    out[-2], out[-1] = loss, version
    return out


def pack_weights(params, version: int) -> torch.Tensor:
    """The weights and their version: a fresh buffer, since an earlier one may still be in flight."""
    out = torch.empty(sum(p.numel() for p in params) + 1, dtype=params[0].dtype, device=params[0].device)
    torch.cat([p.detach().reshape(-1) for p in params], out=out[:-1])
    out[-1] = version
    return out


@torch.no_grad()
def unpack(flat: torch.Tensor, tensors) -> None:
    """Copy consecutive pieces of `flat` into `tensors` (in place)."""
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def _numel(params) -> int:
    return sum(p.numel() for p in params)


@contextlib.contextmanager
def blocked(rec, step: int):
    """Time this rank's compute stream sits waiting on a message: an "idle" bar on the
    timeline, added to `extra["idle_s"][step]` (step 0 includes start-up: skip it)."""
    start = rec.now()
    yield
    end = rec.now()
    rec.event("compute", "idle", start, end)
    idle = rec.extra.setdefault("idle_s", [])
    idle.extend([0.0] * (step + 1 - len(idle)))
    idle[step] += end - start


def start_together(rec) -> None:
    """Untimed barrier: only the server builds an optimizer (its first construction imports
    for ~2 s); without the barrier the workers' first idle time would measure that."""
    with rec.untimed():
        dist.barrier()


def _workers(cfg, world_size: int) -> int:
    """Number of workers (ranks 1..n-1); the global batch must split evenly over them."""
    w = world_size - 1
    if cfg.layout.num_micro_batches != 1:
        raise ValueError("the parameter server takes one batch per worker per step; use micro_batches=1.")
    if w < 1:
        raise ValueError("a parameter server needs at least 2 ranks: rank 0 serves, ranks 1.. work.")
    if cfg.global_batch % w:
        raise ValueError(
            f"the parameter server splits the global batch over the {w} workers (rank 0 only "
            f"serves): global_batch={cfg.global_batch} is not divisible by {w}. Use a global batch "
            f"that is a multiple of {w}, or k+1 ranks where k divides {cfg.global_batch}.")
    return w


def _worker_batches(cfg, rank: int, n_workers: int) -> Batches:
    """Worker `rank` (1..n-1) takes slice `rank-1` of the global batch, as if it were a
    data-parallel rank of a world of `n_workers`: the slices concatenate to the global batch."""
    return Batches(cfg, rank - 1, n_workers)


# ---------------------------------------------------------------- synchronous


def _sync_server(ctx, rec, cfg, model, optimizer, n_workers: int):
    params = list(model.parameters())
    inbox = [torch.empty(_numel(params) + 2, device=ctx.device) for _ in range(n_workers)]
    grads = [torch.empty_like(p) for p in params]
    for step in range(cfg.steps):
        with rec.step(step):
            with blocked(rec, step):  # the server has nothing to do until every gradient is in
                for h in [rec.irecv(buf, w + 1) for w, buf in enumerate(inbox)]:
                    h.wait()
            with rec.compute("opt"):
                total = inbox[0].clone()
                for buf in inbox[1:]:  # in worker order: the same sum every run
                    total.add_(buf)
                total.div_(n_workers)  # the mean gradient = the gradient of the combined batch
                unpack(total[:-2], grads)
                for p, g in zip(params, grads):
                    p.grad = g
                sq_norm = grad_sq_norm(params)
                norm = sq_norm ** 0.5
                # a NaN / inf gradient or loss stops here, naming the step, before the update
                check_finite(float(total[-2]), sq_norm, step=step, rank=ctx.rank)
                optimizer.step()
                weights = pack_weights(params, step + 1)
            for w in range(n_workers):
                rec.isend(weights, w + 1)  # the step's end waits for them
        rec.log(sum(float(buf[-2]) for buf in inbox) / n_workers, norm)
    rec.extra["staleness"] = [0] * (cfg.steps * n_workers)
    rec.memory = memory_breakdown(model, optimizer, None, ctx.device)
    return {"weights": full_state_dict(model)}


def _sync_worker(ctx, rec, cfg, model, n_workers: int):
    params = list(model.parameters())
    batches = _worker_batches(cfg, ctx.rank, n_workers)
    loss_of = loss_fn(cfg)
    meter = ActivationMeter(params)
    grads = torch.empty(_numel(params) + 2, device=ctx.device)
    weights = torch.empty(_numel(params) + 1, device=ctx.device)
    for step in range(cfg.steps):
        x, y = batches(step)
        x, y = x.to(ctx.device), y.to(ctx.device)
        with rec.step(step):
            with rec.compute("fwd"), meter.track():
                loss = loss_of(model(x), y)
            with rec.compute("bwd"):
                for p in params:
                    p.grad = None
                loss.backward()
                pack_grads(params, loss.item(), step, grads)  # flattening counted with backward
            with blocked(rec, step):  # push, then wait for the server's new weights
                rec.send(grads, SERVER)
                rec.recv(weights, SERVER)
            unpack(weights[:-1], params)
    rec.memory = memory_breakdown(model, None, meter, ctx.device)
    return None


def _ps_theory(cfg, dims) -> dict:
    """Bytes per step and memory: the server's link carries every worker's traffic."""
    n_params = count_params(cfg)
    pbytes = 4 * n_params
    w = dims.world_size - 1
    states = 2 if cfg.optimizer == "adamw" else 1
    per_rank = {"0": w * (pbytes + 4), **{str(r): pbytes + 8 for r in range(1, w + 1)}}
    memory = {"0": {"params": pbytes, "grads": pbytes, "optimizer": states * pbytes},
              **{str(r): {"params": pbytes, "grads": pbytes, "optimizer": 0} for r in range(1, w + 1)}}
    return {"params": n_params, "comm_bytes": per_rank["0"], "comm_bytes_per_rank": per_rank,
            "memory": memory}


def _validate(cfg, dims) -> None:
    _workers(cfg, dims.world_size)


# dims: the record says dp=n, the ranks launched; the batch is split over the n-1 workers.
_PS = dict(family="communication", layout=lambda n: Layout(dp=n, dtype="fp32"), min_workers=2,
           default_workers=3, theory=_ps_theory, validate=_validate, batch_ranks=lambda n: n - 1,
           trainer_knobs=False)


def run_ps_sync(ctx, rec, cfg):
    n_workers = _workers(cfg, ctx.world_size)
    model = build_model(cfg).to(ctx.device)  # seeded: every rank starts from the same weights
    optimizer = build_optimizer(cfg, model.parameters(), ctx) if ctx.rank == SERVER else None
    start_together(rec)
    if ctx.rank == SERVER:
        return _sync_server(ctx, rec, cfg, model, optimizer, n_workers)
    return _sync_worker(ctx, rec, cfg, model, n_workers)


# ---------------------------------------------------------------- asynchronous, bounded staleness


def staleness_bound(cfg, n_workers: int) -> int:
    """`cfg.options["staleness"]`, default ``n_workers - 1`` (every worker always busy)."""
    s = cfg.options.get("staleness")
    s = n_workers - 1 if s is None else s
    if not isinstance(s, int) or not 0 <= s <= n_workers - 1:
        raise ValueError(
            f"options['staleness']={s!r}: with {n_workers} workers the bound must be an integer "
            f"from 0 (sequential SGD) to {n_workers - 1} (every worker always busy); more "
            f"staleness adds no parallelism in this round-robin server (see the module docstring).")
    return s


def _async_server(ctx, rec, cfg, model, optimizer, n_workers: int, bound: int):
    params = list(model.parameters())
    total = cfg.steps * n_workers  # updates: one per worker per round
    grads = [torch.empty_like(p) for p in params]
    inbox = torch.empty(_numel(params) + 2, device=ctx.device)
    staleness = []
    version = 0
    first = pack_weights(params, version)
    for u in range(min(bound + 1, total)):  # updates 0..s may start from version 0
        rec.isend(first, 1 + u % n_workers)
    for r in range(cfg.steps):
        losses, norms = [], []
        with rec.step(r):
            for u in range(r * n_workers, (r + 1) * n_workers):
                with blocked(rec, r):
                    rec.recv(inbox, 1 + u % n_workers)
                staleness.append(version - int(inbox[-1]))
                losses.append(float(inbox[-2]))
                with rec.compute("opt"):
                    unpack(inbox[:-2], grads)
                    for p, g in zip(params, grads):
                        p.grad = g
                    sq_norm = grad_sq_norm(params)
                    norms.append(sq_norm ** 0.5)
                    check_finite(losses[-1], sq_norm, step=r, rank=ctx.rank)
                    for g in grads:
                        g.div_(n_workers)  # one round ≈ one synchronous step
                    optimizer.step()
                    version += 1
                    nxt = u + 1 + bound  # the update that may now start, from this version
                    weights = pack_weights(params, version) if nxt < total else None
                if weights is not None:
                    rec.isend(weights, 1 + nxt % n_workers)
        rec.log(sum(losses) / len(losses), sum(norms) / len(norms))
    rec.extra.update(staleness=staleness, staleness_bound=bound, version=version)
    rec.memory = memory_breakdown(model, optimizer, None, ctx.device)
    return {"weights": full_state_dict(model)}


def _async_worker(ctx, rec, cfg, model, n_workers: int):
    params = list(model.parameters())
    batches = _worker_batches(cfg, ctx.rank, n_workers)
    loss_of = loss_fn(cfg)
    meter = ActivationMeter(params)
    grads = torch.empty(_numel(params) + 2, device=ctx.device)
    weights = torch.empty(_numel(params) + 1, device=ctx.device)
    for r in range(cfg.steps):
        x, y = batches(r)
        x, y = x.to(ctx.device), y.to(ctx.device)
        with rec.step(r):
            with blocked(rec, r):  # pull: the weights this gradient is computed on
                rec.recv(weights, SERVER)
            unpack(weights[:-1], params)
            with rec.compute("fwd"), meter.track():
                loss = loss_of(model(x), y)
            with rec.compute("bwd"):
                for p in params:
                    p.grad = None
                loss.backward()
                pack_grads(params, loss.item(), float(weights[-1]), grads)
            with blocked(rec, r):  # push
                rec.send(grads, SERVER)
    rec.memory = memory_breakdown(model, None, meter, ctx.device)
    return None


def _validate_async(cfg, dims) -> None:
    staleness_bound(cfg, _workers(cfg, dims.world_size))


def run_ps_async(ctx, rec, cfg):
    n_workers = _workers(cfg, ctx.world_size)
    bound = staleness_bound(cfg, n_workers)
    model = build_model(cfg).to(ctx.device)
    optimizer = build_optimizer(cfg, model.parameters(), ctx) if ctx.rank == SERVER else None
    start_together(rec)
    if ctx.rank == SERVER:
        return _async_server(ctx, rec, cfg, model, optimizer, n_workers, bound)
    return _async_worker(ctx, rec, cfg, model, n_workers)


register("ps-sync", description="parameter server on rank 0, synchronous: wait for every worker, "
                                "average, step, send weights back", reference="single",
         worker=run_ps_sync, **_PS)
register("ps-async", description="parameter server on rank 0, asynchronous with bounded staleness "
                                 "(options: staleness)", reference=None, worker=run_ps_async,
         knobs=(Knob("staleness", int, None, "bound on update staleness, 0 … n-2", minimum=0),),
         **{**_PS, "validate": _validate_async})
