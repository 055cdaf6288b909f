"""Closed forms for pipeline schedules: the bubble, and the activations each stage holds.

``p`` stages, ``m`` micro-batches, ``v`` model chunks per stage (interleaved), every stage
taking the same time ``t_f`` forward and ``t_b = 2·t_f`` backward:

==============  ==============================  ==========================================
schedule        bubble fraction                 micro-batches of activations on stage ``i``
==============  ==============================  ==========================================
naive           ``(p-1)/p``                     1 (one micro-batch at a time)
gpipe           ``(p-1)/(m+p-1)``               ``m``                (Huang et al. 2019, GPipe)
1f1b            ``(p-1)/(m+p-1)``               ``min(m, p-i)``      (Narayanan et al. 2019, PipeDream;
                                                                      2021, PipeDream-Flush)
interleaved     ``(p-1)/(v·m+p-1)``             ``(2(p-1-i) + (v-1)·p + 1)/v`` (Narayanan et al. 2021)
zb-h1           ``(p-1)/(3m+p-1)``              ``min(m, p-i)``      (Qi et al. 2023, Zero Bubble)
==============  ==============================  ==========================================

The bubble fraction is idle time over total time of a stage. Zero-bubble ZB-H1 splits the
backward into B (input gradient) and W (weight gradient) and fills the 1F1B bubble with
W's; the closed form assumes ``T_F = T_B = T_W`` (the paper's setting, §3.1: backward =
B + W = 2 forward), for which ZB-H1's bubble ``(p-1)·(T_F + T_B - T_W)`` is a third of
1F1B's ``(p-1)·(T_F + T_B + T_W)`` at the same peak memory. The table agrees with the
schedule simulator (``mgpukit.costmodel.simulate``) for equal stage costs.
"""

from __future__ import annotations

from mgpukit.costmodel.actions import SCHEDULES


def bubble_fraction(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Fraction of each stage's step time spent idle, for equal stage costs (table above)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"p, m and v must be >= 1, got p={p}, m={m}, v={v}")
    if schedule == "naive":
        return (p - 1) / p
    if schedule == "interleaved":
        return (p - 1) / (v * m + p - 1)
    if schedule == "zb-h1":
        return (p - 1) / (3 * m + p - 1)
    return (p - 1) / (m + p - 1)  # gpipe, 1f1b


def microbatches_in_flight(schedule: str, p: int, m: int, v: int = 1, stage: int = 0) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of one
    micro-batch through the stage's whole share of layers (``n_layer / p``).

    Interleaved: stage ``i`` runs ``2(p-1-i) + (v-1)·p`` warm-up chunk-forwards, plus one, each
    chunk being ``1/v`` of its layers (Megatron-LM's schedule; stage 0 holds
    ``p · (1 + (p-1)/(p·v))``, Korthikanti et al. 2022, §4.2.3), at most ``m·v`` chunks.
    """
    if not 0 <= stage < p:
        raise ValueError(f"stage={stage} must be in [0, {p})")
    if schedule == "naive" or p == 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved":
        chunks = 2 * (p - 1 - stage) + (v - 1) * p + 1
        return min(chunks, m * v) / v
    return float(min(m, p - stage))  # 1f1b, zb-h1
