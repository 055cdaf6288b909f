"""Planner: predict one layout (:func:`plan`) or rank every sensible one (:func:`search`).

Everything here is closed-form (memory from :mod:`~mgpukit.costmodel.memory`, time from
:mod:`~mgpukit.costmodel.steptime`), so a 70B model on 64 GPUs is answered in milliseconds
and a full search in well under a second. The search follows the usual recipe (Narayanan et
al. 2021, §3.3 "takeaways"): tensor parallelism inside a node, pipeline stages dividing the
layers, data parallelism for the rest; then it keeps the layouts that fit in memory and sorts
them by predicted step time.

The time model (:mod:`~mgpukit.costmodel.steptime`) runs every GEMM on a roofline with tile and
wave quantisation and charges the memory-bound kernels by bytes (:mod:`~mgpukit.costmodel.kernels`);
its two GEMM constants are fitted once on Megatron-LM's published runs, which it reproduces
within 7% from 1.7 B to 1 T parameters (:mod:`~mgpukit.costmodel.published`). Layouts may
also overlap tp communication (``tp_overlap``), split sequences over ``cp`` ranks (ring
attention) and give pipeline stages different layer counts (``stage_layers``); the search
itself keeps to even stages, no cp and no overlap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mgpukit.costmodel.hardware import HardwareProfile, load_profile
from mgpukit.costmodel.layout import Layout, LayoutError, check_layout, divisors
from mgpukit.costmodel.memory import memory_per_rank
from mgpukit.costmodel.shapes import ModelShape, get_shape, param_count
from mgpukit.costmodel.steptime import step_time
from mgpukit.costmodel.volume import comm_bytes_per_step


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Predicted cost of running ``model`` with ``layout`` on ``gpus`` GPUs of ``profile``.

    ``memory``: bytes per GPU by category (fullest GPU); ``time``: :func:`step_time`'s dict;
    ``comm_bytes``: bytes sent per GPU per step. All figures are predictions, not measurements.
    """

    model: ModelShape
    profile: HardwareProfile
    gpus: int
    layout: Layout
    params: int
    memory: dict
    memory_limit: float
    time: dict
    comm_bytes: dict

    @property
    def fits(self) -> bool:
        return self.memory["total"] <= self.memory_limit

    @property
    def step_time_s(self) -> float:
        return self.time["total_s"]

    @property
    def mfu(self) -> float:
        return self.time["mfu"]

    @property
    def bubble_fraction(self) -> float:
        return self.time["bubble_fraction"]

    def to_dict(self) -> dict:
        """Plain JSON-ready dict; ``predicted: true`` marks it as a model output."""
        return {
            "predicted": True,
            "model": asdict(self.model),
            "params": self.params,
            "profile": self.profile.name,
            "gpus": self.gpus,
            "layout": asdict(self.layout),
            "memory": dict(self.memory),
            "memory_limit": self.memory_limit,
            "fits": self.fits,
            "time": dict(self.time),
            "comm_bytes": dict(self.comm_bytes),
        }


def plan(model: "str | ModelShape", gpus: int, profile: "str | HardwareProfile", layout: Layout) -> Plan:
    """Predict memory, step time, MFU and bubble of ``layout``; raises :class:`LayoutError`
    (saying what to change) when the layout cannot run at all. A layout that runs but does not
    fit in memory gives a plan with ``fits == False``."""
    shape = get_shape(model)
    hw = load_profile(profile) if isinstance(profile, str) else profile
    check_layout(shape, layout, gpus=gpus)
    return Plan(
        model=shape, profile=hw, gpus=gpus, layout=layout, params=param_count(shape),
        memory=memory_per_rank(shape, layout), memory_limit=hw.usable_memory_bytes,
        time=step_time(shape, layout, hw), comm_bytes=comm_bytes_per_step(shape, layout),
    )


def candidate_layouts(shape: ModelShape, gpus: int, profile: HardwareProfile, *, global_batch: int,
                      micro_batches=(1, 2, 4, 8), max_v: int = 8):
    """Every layout the search considers. Pruned: tp within a node and dividing the heads,
    pp dividing the layers, SP always on with tp > 1 (same traffic, less memory), ZeRO-2/3
    only without pipelining (they re-communicate every micro-batch), interleaving with
    ``v ≤ max_v`` chunks."""
    for tp in divisors(gpus):
        if tp > profile.gpus_per_node or shape.n_head % tp or shape.kv_heads % tp:
            continue
        for pp in divisors(gpus // tp):
            if shape.n_layer % pp:
                continue
            dp = gpus // (tp * pp)
            if global_batch % dp:
                continue
            for mb in micro_batches:
                if (global_batch // dp) % mb:
                    continue
                m = global_batch // (dp * mb)
                if pp == 1:
                    schedules = [("1f1b", 1)]
                else:
                    schedules = [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1)]
                    if m % pp == 0:
                        schedules += [("interleaved", v) for v in range(2, max_v + 1)
                                      if (shape.n_layer // pp) % v == 0]
                for zero in (range(4) if pp == 1 else range(2)):
                    if dp == 1 and zero:
                        continue
                    for ckpt in ("none", "selective", "full"):
                        for schedule, v in schedules:
                            yield Layout(dp=dp, tp=tp, pp=pp, zero=zero, sp=tp > 1, schedule=schedule, v=v,
                                         micro_batch=mb, num_micro_batches=m, checkpointing=ckpt)


def search(model: "str | ModelShape", gpus: int, profile: "str | HardwareProfile", *, global_batch: int,
           top: int = 10, include_unfit: bool = False) -> list[Plan]:
    """Rank every candidate layout (:func:`candidate_layouts`) that fits by predicted step time
    (ties: less memory first). ``include_unfit=True`` appends the rest, smallest memory first."""
    shape = get_shape(model)
    hw = load_profile(profile) if isinstance(profile, str) else profile
    limit = hw.usable_memory_bytes
    fitting, unfit = [], []
    for layout in candidate_layouts(shape, gpus, hw, global_batch=global_batch):
        try:
            check_layout(shape, layout, gpus=gpus)
        except LayoutError:
            continue
        memory = memory_per_rank(shape, layout)
        if memory["total"] > limit:  # cheap test first: only fitting layouts get timed
            if include_unfit:
                unfit.append((memory["total"], layout))
            continue
        fitting.append(plan(shape, gpus, hw, layout))
    fitting.sort(key=lambda pl: (pl.step_time_s, pl.memory["total"]))
    result = fitting[:top]
    if include_unfit and len(result) < top:
        unfit.sort(key=lambda item: item[0])
        result += [plan(shape, gpus, hw, lay) for _, lay in unfit[: top - len(result)]]
    return result
