"""Planner: predict one layout (:func:`plan`) or rank every sensible one (:func:`search`).

Everything here is closed-form (memory from :mod:`~mgpukit.costmodel.memory`, time from
:mod:`~mgpukit.costmodel.steptime`), so a 70B model on 1,024 GPUs is searched in well under
a second or two. The search follows the usual recipe (Narayanan et al. 2021, §3.3
"takeaways"): tensor parallelism inside a node, pipeline stages across nodes, data
parallelism for the rest; then it keeps the layouts that fit in memory and sorts them by
predicted step time.

What it tries: every tp within a node that divides the heads; context parallelism ``cp`` of 1,
2, 4, 8 where each rank keeps at least :data:`MIN_CP_TOKENS` of a sequence; for a mixture of
experts, every expert-parallel degree ``ep`` dividing the experts (up to :data:`MAX_EP`), the
ep group inside the data-parallel ranks; every pp up to the
layer count that divides the rest, its stages **balanced by cost**
(:mod:`~mgpukit.costmodel.balance`: the embedding and the head counted, so 70 layers go on 12
stages as 5 + 6 × 10 + 5); the framework's schedules (interleaved with up to one layer per
chunk, ``v · pp ≤ layers + 2``, as Llama 3's v = 8 on 16 stages); ZeRO 0-3, with pipelining too
(Llama 3 shards gradients and optimizer states beside 16 pipeline stages; ZeRO-2/3 then
re-communicate every micro-batch, which the time model charges); no, full and — only where it
differs, i.e. without fused attention — selective checkpointing; every micro-batch that divides
a replica's batch up to :data:`MAX_MICRO_BATCH` (3, 6, 12 where they divide); tp collectives
overlapped with the GEMMs where the framework offers it (Megatron-Core's ``--tp-comm-overlap``;
the layout without it is never faster in the time model, so it is not tried). The dtype (bf16,
fp16, fp8) and the framework (:mod:`~mgpukit.costmodel.frameworks`: dp-sync convention,
kernels) are inputs, not searched. Layouts whose predictions coincide (the same step time and
memory) are listed once. The 70B / 1,024-GPU search times ~9,300 layouts in 1.3-1.7 s of CPU
(a layer's kernels are computed once per (tp, cp, micro-batch): ``steptime._memo``).

Every :class:`Plan` carries its **error bar**: a prediction interval from the planner's errors on
published runs of the same framework on the same GPU generation, widened for few runs and for a
generation with none (:mod:`~mgpukit.costmodel.validation`, :mod:`~mgpukit.costmodel.bands`),
applied to step time, MFU and throughput (``Plan.ranges``) and, through
:func:`~mgpukit.costmodel.training_cost.time_to_train`, to days, GPU-hours and cost; and its
**memory bar** (``Plan.memory_range``, ``Plan.memory_verdict``: near the limit when the top of
the bar does not fit). :func:`ties_with_best` marks the layouts of a search whose predicted step
sits inside the best one's range.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from mgpukit.costmodel.balance import balance_stages
from mgpukit.costmodel.frameworks import Framework, get_framework
from mgpukit.costmodel.hardware import HardwareProfile, load_profile
from mgpukit.costmodel.layout import Layout, LayoutError, check_layout, divisors
from mgpukit.costmodel.memory import memory_per_rank
from mgpukit.costmodel.shapes import ModelShape, get_shape, param_count
from mgpukit.costmodel.steptime import OVERLAP_SLOWDOWN, step_time
from mgpukit.costmodel.error_bars import ErrorBar, error_bar, memory_error_bar, unchecked, without_published
from mgpukit.costmodel.volume import comm_bytes_per_step


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Predicted cost of running ``model`` with ``layout`` on ``gpus`` GPUs of ``profile`` in
    ``framework``.

    ``memory``: bytes per GPU by category (fullest GPU); ``time``: :func:`step_time`'s dict;
    ``comm_bytes``: bytes sent per GPU per step; ``error_bar``: the planner's errors on published
    runs of this framework. All figures are predictions, not measurements.
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
    framework: Framework
    error_bar: ErrorBar
    memory_bar: ErrorBar

    @property
    def fits(self) -> bool:
        return self.memory["total"] <= self.memory_limit

    @property
    def memory_range(self) -> tuple[float, float]:
        """The real peak per GPU the memory bar allows around the predicted ``memory["total"]``."""
        return self.memory_bar.held(self.memory["total"])

    @property
    def memory_verdict(self) -> str:
        """``fits``, ``near the limit`` (fits as predicted, not at the top of the memory bar),
        ``may fit`` (does not as predicted, does at the bottom) or ``does not fit``."""
        low, high = self.memory_range
        if self.fits:
            return "fits" if high <= self.memory_limit else "near the limit"
        return "may fit" if low <= self.memory_limit else "does not fit"

    @property
    def step_time_s(self) -> float:
        return self.time["total_s"]

    @property
    def mfu(self) -> float:
        return self.time["mfu"]

    @property
    def bubble_fraction(self) -> float:
        return self.time["bubble_fraction"]

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        """``step_time_s``, ``mfu``, ``tokens_per_s``: (low, high) from the error bar."""
        eb = self.error_bar
        return {"step_time_s": eb.time(self.step_time_s), "mfu": eb.rate(self.mfu),
                "tokens_per_s": eb.rate(self.time["tokens_per_s"])}

    @property
    def unchecked(self) -> tuple[str, ...]:
        """What this layout uses that no run behind its error bar used (fp8 GEMMs, flash
        attention, ...): there the error bar may understate the error."""
        return unchecked(self.layout, self.framework)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict; ``predicted: true`` marks it as a model output."""
        return {
            "predicted": True,
            "model": asdict(self.model),
            "params": self.params,
            "profile": self.profile.name,
            "framework": self.framework.name,
            "dp_sync": self.framework.dp_sync,  # the framework's, or --dp-sync's
            "kernel_efficiency": self.framework.kernel_efficiency,
            "gpus": self.gpus,
            "layout": asdict(self.layout),
            "memory": dict(self.memory),
            "memory_limit": self.memory_limit,
            "fits": self.fits,
            "time": dict(self.time),
            "ranges": {k: list(v) for k, v in self.ranges.items()},
            "error_bar": asdict(self.error_bar),
            "error_bar_unchecked": list(self.unchecked),
            "memory_bar": asdict(self.memory_bar),
            "memory_range": list(self.memory_range),
            "memory_verdict": self.memory_verdict,
            "comm_bytes": dict(self.comm_bytes),
        }


def plan(model: "str | ModelShape", gpus: int, profile: "str | HardwareProfile", layout: Layout, *,
         framework: "str | Framework | None" = None, stragglers: bool = True, memory: dict | None = None) -> Plan:
    """Predict memory, step time, MFU and bubble of ``layout``; raises :class:`LayoutError`
    (saying what to change) when the layout cannot run at all — an fp8 layout on a GPU without
    fp8, a pipeline schedule the framework does not offer included. A layout that runs but does
    not fit in memory gives ``fits == False``.

    ``stragglers``: the step waits for the slowest of the ``gpus`` GPUs (``time["straggler_s"]``,
    from the profile's ``gpu_spread``; :mod:`~mgpukit.costmodel.fleet`); False: every GPU at the
    profile's rate. A100 profiles carry no spread (their rate already holds it): 0 either way.
    ``memory``: :func:`memory_per_rank`'s dict when the caller has it (the search)."""
    shape = get_shape(model)
    hw = load_profile(profile) if isinstance(profile, str) else profile
    fw = get_framework(framework)
    check_layout(shape, layout, gpus=gpus)
    check_dtype(hw, layout.dtype)
    check_schedule(fw, layout)
    return Plan(
        model=shape, profile=hw, gpus=gpus, layout=layout, params=param_count(shape),
        memory=memory or memory_per_rank(shape, layout), memory_limit=hw.usable_memory_bytes,
        time=step_time(shape, layout, hw, framework=fw, interference=OVERLAP_SLOWDOWN,
                       gpu_spread=hw.gpu_spread if stragglers else 0.0, sustained=True),
        comm_bytes=comm_bytes_per_step(shape, layout),
        framework=fw, error_bar=_error_bar(shape, layout, fw, hw), memory_bar=memory_error_bar(),
    )


def _error_bar(shape: ModelShape, layout: Layout, fw: Framework, hw: HardwareProfile) -> ErrorBar:
    """The framework's error bar; for a mixture of experts or a split sequence, which no published
    run in the table used, the dense band widened (`error_bars.without_published`)."""
    eb = error_bar(fw, hw.name)
    kinds = tuple(k for k, on in (("moe", shape.is_moe), ("cp", layout.cp > 1)) if on)
    return without_published(eb, kinds) if kinds else eb


def check_dtype(profile: HardwareProfile, dtype: str) -> None:
    """Refuse a precision the GPU cannot run (fp8 on an A100), in one line."""
    try:
        profile.flops(dtype)
    except ValueError as e:
        raise LayoutError(str(e)) from None


def check_schedule(framework: Framework, layout: Layout) -> None:
    """Refuse a pipeline schedule the framework does not offer (DeepSpeed's engine has no
    interleaving), in one line. ``naive`` — one micro-batch through all stages at a time — is
    the textbook's reference point, accepted in any framework."""
    if layout.pp > 1 and layout.schedule != "naive" and layout.schedule not in framework.schedules:
        raise LayoutError(f"framework '{framework.name}' has no '{layout.schedule}' pipeline schedule (it offers "
                          f"{', '.join(framework.schedules)}); choose {'it' if len(framework.schedules) == 1 else 'one of those'} "
                          f"or another framework")


MAX_MICRO_BATCH = 16  # sequences per micro-batch the search tries at most
MAX_CP = 8  # context-parallel degrees the search tries at most
# ... and only where each rank keeps at least this many tokens of a sequence: ring attention hides each
# step's K/V exchange behind a 1/cp share of the attention core, which shrinks with the chunk; Llama 3
# ran CP only at 128K context (16 ranks of 8,192 tokens), none at 8K (Dubey et al. 2024, §3.3.2). A search
# bound, not physics: `plan --cp` prices any degree; the search leaves the rest out to stay under 2 s.
MIN_CP_TOKENS = 2048
# expert-parallel degrees the search tries at most (each must divide the experts): DeepSeek-V3 trained with
# ep 64 (arXiv:2412.19437 §3.2), Mixtral-sized models with ep ≤ 8; `plan --ep` prices any divisor
MAX_EP = 64


def candidate_layouts(shape: ModelShape, gpus: int, profile: HardwareProfile, *, global_batch: int,
                      micro_batches=None, max_v: int | None = None, dtype: str = "bf16",
                      framework: "str | Framework | None" = None, flash_attention: bool = True,
                      tp: int | None = None, pp: int | None = None, cp: int | None = None, ep: int | None = None):
    """Every layout the search considers (module docstring); ``tp`` / ``pp`` / ``cp`` keep only that
    degree. ``micro_batches``: the sizes tried (default: every divisor of a replica's batch up to
    :data:`MAX_MICRO_BATCH`, 3, 5 or 6 included where they divide); ``max_v``: most interleaved
    chunks per stage (default: one layer per chunk, ``v · pp ≤ layers + 2`` — the two ends may
    hold only the embedding and the head, as Llama 3). Pipelined layouts carry their
    cost-balanced ``stage_layers`` (None when that is the even split)."""
    fw = get_framework(framework)
    ckpts = ("none", "full") if flash_attention else ("none", "selective", "full")
    # tp overlap only hides collectives (steptime: exposed = max(0, comm - GEMMs)), at the same memory:
    # where the framework offers it, the layout without it is never faster, so only the overlapped one is tried
    overlap = fw.tp_overlap
    balanced: dict = {}  # (tp, ep, pp, mb, ckpt, v) -> stage layers: the split ignores ZeRO, dp and cp

    def stages(tp, pp, mb, ckpt, schedule, v, m, ep=1):
        key = (tp, ep, pp, mb, ckpt, v)
        if key not in balanced:
            probe = Layout(tp=tp, pp=pp, ep=ep, sp=tp > 1, schedule=schedule, v=v, micro_batch=mb, num_micro_batches=m,
                           checkpointing=ckpt, dtype=dtype, flash_attention=flash_attention)
            split = balance_stages(shape, probe, profile, framework=fw)
            even = split is not None and len(set(split)) == 1
            balanced[key] = None if split is None else (None if even else split)
            balanced[key, "ok"] = split is not None
        return balanced[key], balanced[key, "ok"]

    only_tp, only_pp, only_cp, only_ep = tp, pp, cp, ep
    for tp, cp, ep in _degrees(shape, gpus, profile):
        if only_tp not in (None, tp) or only_cp not in (None, cp) or only_ep not in (None, ep):
            continue
        for pp in divisors(gpus // (tp * cp * ep)):
            if pp > shape.n_layer:
                break
            if only_pp not in (None, pp):
                continue
            dp = gpus // (tp * cp * ep * pp)
            if global_batch % (dp * ep):
                continue
            per_replica = global_batch // (dp * ep)
            for mb in (micro_batches or [d for d in divisors(per_replica) if d <= MAX_MICRO_BATCH]):
                if per_replica % mb:
                    continue
                m = per_replica // mb
                if pp == 1:
                    schedules = [("1f1b", 1)]
                else:
                    schedules = [(s, 1) for s in ("1f1b", "gpipe", "zb-h1") if s in fw.schedules]
                    if "interleaved" in fw.schedules and m % pp == 0:
                        top_v = (shape.n_layer + 2) // pp if max_v is None else max_v
                        schedules += [("interleaved", v) for v in range(2, top_v + 1) if v * pp <= shape.n_layer + 2]
                for ckpt in ckpts:
                    for schedule, v in schedules:
                        split, ok = stages(tp, pp, mb, ckpt, schedule, v, m, ep) if pp > 1 else (None, True)
                        if not ok:
                            continue
                        for zero in range(4):
                            if dp * ep == 1 and zero:  # ZeRO shards over dp (experts) and dp·ep (the rest)
                                continue
                            yield Layout(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, sp=tp > 1, schedule=schedule, v=v,
                                         micro_batch=mb, num_micro_batches=m, checkpointing=ckpt, dtype=dtype,
                                         flash_attention=flash_attention, stage_layers=split,
                                         tp_overlap=overlap and tp > 1)


def _degrees(shape: ModelShape, gpus: int, profile: HardwareProfile):
    """(tp, cp, ep) the search tries: tp within a node dividing the heads; cp of 2 … :data:`MAX_CP`
    where each rank keeps :data:`MIN_CP_TOKENS` of a sequence; ep dividing the experts (a MoE only),
    at most :data:`MAX_EP`."""
    for tp in divisors(gpus):
        if tp > profile.gpus_per_node or shape.n_head % tp or shape.kv_heads % tp:
            continue
        for cp in divisors(gpus // tp):
            if cp > 1 and (cp > MAX_CP or shape.seq_len % cp or shape.seq_len // cp < MIN_CP_TOKENS):
                continue
            for ep in divisors(gpus // (tp * cp)):
                if ep > 1 and (ep > MAX_EP or shape.n_expert % ep):
                    continue
                yield tp, cp, ep


def search(model: "str | ModelShape", gpus: int, profile: "str | HardwareProfile", *, global_batch: int,
           top: int = 10, include_unfit: bool = False, dtype: str = "bf16",
           framework: "str | Framework | None" = None, flash_attention: bool = True,
           tp: int | None = None, pp: int | None = None, stragglers: bool = True) -> list[Plan]:
    """Rank every candidate layout (:func:`candidate_layouts`) that fits by predicted step time
    (ties: less memory first), each prediction once. ``include_unfit=True`` appends the rest,
    smallest memory first. ``tp`` / ``pp`` restrict the search to that degree; ``stragglers`` as
    in :func:`plan`."""
    shape = get_shape(model)
    hw = load_profile(profile) if isinstance(profile, str) else profile
    fw = get_framework(framework)
    check_dtype(hw, dtype)
    limit = hw.usable_memory_bytes
    fitting, unfit = [], []
    for layout in candidate_layouts(shape, gpus, hw, global_batch=global_batch, dtype=dtype, framework=fw,
                                    flash_attention=flash_attention, tp=tp, pp=pp):
        try:
            check_layout(shape, layout, gpus=gpus)
        except LayoutError:
            continue
        memory = memory_per_rank(shape, layout)
        if memory["total"] > limit:  # cheap test first: only fitting layouts get timed
            if include_unfit:
                unfit.append((memory["total"], layout))
            continue
        fitting.append(plan(shape, gpus, hw, layout, framework=fw, stragglers=stragglers, memory=memory))
    fitting.sort(key=lambda pl: (pl.step_time_s, pl.memory["total"]))
    result = _distinct(fitting, top)
    if include_unfit and len(result) < top:
        unfit.sort(key=lambda item: item[0])
        result += _distinct([plan(shape, gpus, hw, lay, framework=fw, stragglers=stragglers)
                             for _, lay in unfit[: 4 * top]],
                            top - len(result))
    return result


def ties_with_best(plans: list[Plan]) -> list[bool]:
    """For each plan, whether its predicted step time sits inside the first (best) plan's range
    from the error bar, ``T ≤ T_best · (1 + high)``: the planner cannot tell the two apart, so
    the ranking between them is not a prediction. The best plan ties with itself; plans that do
    not fit never tie."""
    if not plans:
        return []
    best = plans[0]
    top = best.ranges["step_time_s"][1]
    return [pl.fits and best.fits and pl.step_time_s <= top for pl in plans]


def _distinct(plans: list[Plan], top: int) -> list[Plan]:
    """The first ``top`` plans whose predictions differ: two layouts with the same step time and
    the same memory to 6 significant digits say nothing new (the first, simplest, is kept)."""
    seen, out = set(), []
    for pl in plans:
        key = (f"{pl.step_time_s:.6g}", f"{pl.memory['total']:.6g}")
        if key not in seen:
            seen.add(key)
            out.append(pl)
            if len(out) == top:
                break
    return out
