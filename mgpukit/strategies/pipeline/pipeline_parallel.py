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
- ``pp-interleaved``: ``v`` chunks per rank (``--v`` or ``-o v=K``, default 2), so a rank's turn is
  ``1/v`` as long: bubble ``(p-1)/(v·m+p-1)``, for ``v×`` more messages (same paper, §2.2).
- ``pp-zb``: ZB-H1 (Qi et al. 2023, arXiv:2401.10241): backward split into input-grad (I)
  and weight-grad (W); the W's fill the cool-down bubble (``split_backward.py``).

All five run the same executor (``engine.py``) on the table ``build_schedule(name, p, m, v)``
gives, inside the one trainer; ``--dp`` combines them with data parallelism (dp × pp); the
gradients are those of the full batch (each micro-batch's loss is scaled by ``1/m``), so the
weights match the single-process reference up to the order of floating-point additions.
Knobs (``m``, ``v``): ``plan.py``.
"""
from __future__ import annotations

from mgpukit.costmodel.layout import Layout
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.pipeline.plan import theory
from mgpukit.strategies.registry import register

# Pipelining changes the order in which micro-batch gradients are added; PyTorch's own
# pipelining tests compare with rtol 1e-5, atol 4e-5 (test/distributed/pipelining).
PARITY_TOLERANCE = {"rtol": 1e-5, "atol": 4e-5}
V_KNOB = Knob("v", int, None, "model chunks per rank (interleaved only, default 2)", minimum=1)


def pipeline_layout(schedule: str):
    """The default layout of a pipeline strategy on n workers: all of them pipeline stages."""
    def layout(n: int) -> Layout:
        return Layout(pp=n, schedule=schedule, v=2 if schedule == "interleaved" else 1, dtype="fp32")

    return layout


def register_pipeline(name: str, schedule: str, description: str, *, runtime: str = "ours", **fields):
    return register(name, family="pipeline", description=description, schedule=schedule,
                    pipeline=runtime, layout=pipeline_layout(schedule), theory=theory,
                    tolerance=PARITY_TOLERANCE, knobs=(V_KNOB,),
                    **fields)


register_pipeline("mp-naive", "naive", "model split over ranks, whole batch at once: bubble (p-1)/p")
register_pipeline("pp-gpipe", "gpipe", "GPipe: m micro-batches, all forwards then all backwards")
register_pipeline("pp-1f1b", "1f1b", "1F1B (PipeDream-Flush): one forward, one backward; <= p in flight")
register_pipeline("pp-interleaved", "interleaved", "interleaved 1F1B: v chunks per rank, bubble / v")
register_pipeline("pp-zb", "zb-h1", "zero bubble ZB-H1: backward split into input-grad and weight-grad")
