"""Model and pipeline parallelism, written out: the layers are cut into stages, one per rank.

The assembly line. Rank ``r`` holds stage ``r`` — a contiguous slice of the layers (stage 0
also the embedding, the last stage the head and the loss) — and only its slice: a model too
big for one device fits on ``p``. What flows between ranks is the activation at the cut
(``B × T × C`` floats) forward and its gradient backward, by point-to-point send/recv — no
collective at all (``p2p.py``).

One batch at a time (``mp-naive``), only one rank works while the others wait: the *bubble*
is ``(p-1)/p``. Cutting the batch into ``m`` micro-batches lets stage ``s`` start micro-batch
``i+1`` while stage ``s+1`` works on ``i``:

- ``pp-gpipe``: all forwards, then all backwards (Huang et al. 2019, arXiv:1811.06965).
  Bubble ``(p-1)/(m+p-1)``; every rank holds the activations of all ``m`` micro-batches.
- ``pp-1f1b``: after a warm-up, one forward then one backward (PipeDream-Flush, Narayanan
  et al. 2021, arXiv:2104.04473). Same bubble; at most ``p`` micro-batches in flight.
- ``pp-interleaved``: ``v`` chunks per rank (``options["v"]``, default 2), so a rank's turn is
  ``1/v`` as long: bubble ``(p-1)/(v·m+p-1)``, for ``v×`` more messages (same paper, §2.2).
- ``pp-zb``: ZB-H1 (Qi et al. 2023, arXiv:2401.10241): backward split into input-grad (I)
  and weight-grad (W); the W's fill the cool-down bubble (``split_backward.py``).

All five run the same executor on the table ``build_schedule(name, p, m, v)`` gives; the
gradients are those of the full batch (each micro-batch's loss is scaled by ``1/m``), so the
weights match the single-process reference up to the order of floating-point additions.
Knobs (``m``, ``v``): ``plan.py``.
"""
from __future__ import annotations

from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.common import Batches, build_model, build_optimizer, loss_fn
from mgpukit.strategies.pipeline.plan import plan_for, theory, validate
from mgpukit.strategies.pipeline.train import train_pipeline
from mgpukit.strategies.registry import register

# Pipelining changes the order in which micro-batch gradients are added; PyTorch's own
# pipelining tests compare with rtol 1e-5, atol 4e-5 (test/distributed/pipelining).
PARITY_TOLERANCE = {"rtol": 1e-5, "atol": 4e-5}


def run_schedule(schedule: str, ctx, rec, cfg):
    """The worker of every hand-written pipeline strategy: plan, then train."""
    plan = plan_for(schedule, cfg, ctx.world_size)  # raises before building anything
    model = build_model(cfg)
    batches = Batches(cfg, 0, 1)  # the global batch: stage 0 needs x, the last stage y
    return train_pipeline(ctx, rec, model=model, batches=batches, loss_fn=loss_fn(cfg),
                          schedule=plan.schedule, m=plan.m, v=plan.v, steps=cfg.steps,
                          make_optimizer=lambda params: build_optimizer(cfg, params))


def _register(name: str, schedule: str, description: str):
    def worker(ctx, rec, cfg):
        return run_schedule(schedule, ctx, rec, cfg)

    worker.__name__ = f"run_{name.replace('-', '_')}"
    worker.__doc__ = description
    register(name, family="pipeline", description=description,
             dims=lambda n: ParallelDims(pp=n), theory=theory(schedule),
             validate=validate(schedule), tolerance=PARITY_TOLERANCE)(worker)
    return worker


run_mp_naive = _register("mp-naive", "naive",
                         "model split over ranks, whole batch at once: bubble (p-1)/p")
run_pp_gpipe = _register("pp-gpipe", "gpipe",
                         "GPipe: m micro-batches, all forwards then all backwards")
run_pp_1f1b = _register("pp-1f1b", "1f1b",
                        "1F1B (PipeDream-Flush): one forward, one backward; <= p in flight")
run_pp_interleaved = _register("pp-interleaved", "interleaved",
                               "interleaved 1F1B: v chunks per rank, bubble / v")
run_pp_zb = _register("pp-zb", "zb-h1",
                      "zero bubble ZB-H1: backward split into input-grad and weight-grad")
