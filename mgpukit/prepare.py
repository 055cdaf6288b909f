"""Everything a run is checked for, before anything starts: `prepare` resolves the layout.

`prepare(strategy, workers=, mode=, profile=, config=, layout=, **overrides)` turns what was
asked — on the command line (`mgpukit run … --dp 2 --pp 2`), from Python (`mgpukit.run`), by
an exported script — into one `Prepared` run: the strategy, its `RunConfig`, and the one
validated `Layout` (dp, tp, pp, schedule, v, micro-batches, policies) with the `ParallelDims`
built from it. The launch hands that layout to every worker's context (`ctx.layout`, the mesh
from `ctx.dims`), the appliers (`mgpukit.parallelize`) read it there, and the cost model
predicts from the same object — so a run and its prediction describe the same thing by
construction. Whatever cannot run is refused here with a sentence saying what to change.

Which strategies combine with which axis comes from the strategies' own declarations
(`Strategy.composes`), so the refusals name what the registry says, not a list kept by hand.
"""
from __future__ import annotations

import dataclasses
import math

from mgpukit import strategies
from mgpukit.config import MOE_MODELS, SHAPE_MODELS, RunConfig
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.files import check_distinct, check_output
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.modes import ResolvedMode, resolve_mode
from mgpukit.strategies.pipeline.plan import plan_for
from mgpukit.strategies.policies.checkpointing import check_checkpointing
from mgpukit.strategies.policies.precision import check_precision
from mgpukit.strategies.registry import Strategy
from mgpukit.strategies.tensor_parallel.apply import check_divides
from mgpukit.training.batch_split import check_batch_split
from mgpukit.training.knob_hooks import check_knobs
from mgpukit.training.resources import check_memory


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prepared:
    """A run that passed every check: what `launch` needs and what the record says."""

    strategy: Strategy
    cfg: RunConfig  # its `layout` is the resolved one: the run's only carrier of the layout
    dims: ParallelDims  # the mesh's shape, built once from that layout (`resolve_layout`)
    mode: ResolvedMode  # "cpu" | "gpu" | "emulated", resolved here once: `launch` takes it as it is
    profile: str | None
    shape: bool = False  # shape mode: fake tensors at real scale (mgpukit.measure.shape)
    model_note: str = ""  # why the model is not the kit's default (a strategy's own default model)

    @property
    def layout(self) -> Layout:
        return self.cfg.layout

    @property
    def workers(self) -> int:
        return self.dims.world_size


def prepare(strategy: str, *, workers: int | None = None, mode: str = "auto", profile=None,
            config: RunConfig | None = None, layout: dict | None = None, shape: bool = False,
            **overrides) -> Prepared:
    """Every check a run needs, before anything starts; raises ValueError saying what to change."""
    strat = strategies.get(strategy)
    if config is not None and not isinstance(config, RunConfig):
        raise TypeError(f"config={config!r}: give a mgpukit.config.RunConfig (or leave it out and pass "
                        f"its fields, e.g. steps=5).")
    if layout is not None and not isinstance(layout, dict):
        raise TypeError(f"layout={layout!r}: give a dict of layout fields, e.g. {{'dp': 2, 'pp': 2}}.")
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError(f"unknown argument {unknown[0]!r}; a run takes the fields of RunConfig "
                        f"({', '.join(sorted(fields))}) besides its own keywords.")
    cfg = (config or RunConfig()).replace(**overrides) if overrides else (config or RunConfig())
    check_shape(shape, mode, cfg.model, strat, cfg.options)
    cfg = cfg.replace(options=strat.check_options(cfg.options))
    # the kit's default model is dense: a strategy for MoE models runs its own (ep: gpt-moe), and says so;
    # a model asked for by name (model=..., --model, a config naming another) is refused instead
    asked = "model" in overrides or (config is not None and config.model != RunConfig.model)
    model_note = ""
    if cfg.model == RunConfig.model and cfg.model not in strat.models and not asked:
        cfg = cfg.replace(model=strat.models[0])
        model_note = (f"model {cfg.model}: {strategy}'s default ({RunConfig.model}, the kit's default, "
                      f"{'has no experts' if cfg.model in MOE_MODELS else 'does not run here'})")
    check_model_options(cfg)
    if cfg.model not in strat.models:
        if set(strat.models) <= set(MOE_MODELS):
            raise ValueError(f"model {cfg.model!r} has no experts: strategy {strategy!r} splits a mixture of "
                             f"experts ({', '.join(strat.models)}); drop --model ({strategy}'s default is "
                             f"{strat.models[0]}) or choose one of those.")
        raise ValueError(f"strategy {strategy!r} runs on models {strat.models}, not {cfg.model!r}.")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers={workers!r}: use a positive number of workers.")
    if cfg.layout is not None:  # a full layout given: its fields are the overrides
        layout = {**{k: getattr(cfg.layout, k) for k in ("dp", "tp", "pp", "cp", "ep", "schedule", "v",
                                                         "checkpointing", "dtype", "stage_layers")},
                  **(layout or {})}
    resolved, dims = resolve_layout(strat, cfg, workers, layout)
    if dims.world_size < strat.min_workers:
        raise ValueError(f"strategy {strategy!r} needs at least {strat.min_workers} workers, "
                         f"got {dims.world_size}.")
    cfg = cfg.replace(layout=resolved)
    if resolved.pp == 1 and not cfg.options.get("batch_split"):
        check_batch(cfg, strat.batch_ranks(dims.world_size) if strat.batch_ranks else dims.batch_coords(0)[1])
    if strat.validate:
        strat.validate(cfg, dims)
    check_memory(cfg, dims.world_size, strat.batch_ranks(dims.world_size) if strat.batch_ranks else dims.dp,
                 shape=bool(shape))  # a batch that cannot fit is refused here, not in a rank
    if mode == "emulated" and not strat.emulation:
        raise ValueError(f"strategy {strategy!r} has no emulated mode; use mode='cpu'.")
    mode = resolve_mode(mode, dims.world_size)
    check_batch_split(cfg, dims)  # unequal batches per dp rank (training/batch_split.py)
    check_knobs(cfg, dims, mode, strat.name)  # a lesson's hooks: straggler, mixed cluster, backups
    if mode == "emulated" and not profile:
        raise ValueError("mode='emulated' needs a hardware profile, e.g. profile='h100-nvlink'.")
    if mode == "emulated" and isinstance(profile, str):
        load_profile(profile)  # an unknown profile fails here, naming the known ones
    return Prepared(strategy=strat, cfg=cfg, dims=dims, mode=mode,
                    profile=profile if mode == "emulated" else None, shape=bool(shape), model_note=model_note)


def check_shape(shape, mode: str, model: str, strat: Strategy, options: dict) -> None:
    """Shape mode is emulated only (fake tensors have no values to measure). The real-scale
    models run in shape mode or for real, after the memory check (`mgpukit.fits`)."""
    if not isinstance(shape, bool):
        raise ValueError(f"shape={shape!r}: give True or False.")
    if shape and mode != "emulated":
        raise ValueError("shape mode runs on the virtual clock only: add --emulate PROFILE "
                         "(mode='emulated', profile='h100-nvlink').")
    if shape and strat.worker is not None:
        raise ValueError(f"{strat.name} runs its own worker loop; shape mode runs the appliers "
                         f"and the one trainer only.")
    if shape and options.get("checkpoint_dir"):
        raise ValueError("shape mode has no weights to checkpoint (fake tensors); drop checkpoint_dir.")


def check_model_options(cfg: RunConfig) -> None:
    """The model knobs (`model_sizes`, `input_grad`) describe a model that can be built."""
    sizes = cfg.options.get("model_sizes")
    if sizes:
        try:
            cfg.model_config()
        except (TypeError, ValueError) as e:
            raise ValueError(f"model_sizes={sizes!r} does not size {cfg.model!r} ({e}); give fields of its "
                             f"config, e.g. {{'n_layers': 8}}.") from None
    if cfg.options.get("input_grad") and cfg.is_gpt:
        raise ValueError(f"input_grad=true needs an input of numbers; {cfg.model!r} reads token ids. "
                         f"Use an MLP model (mlp-tiny, mlp-wide).")


def default_collective_timeout(cfg: RunConfig, mode: str, *, shape: bool = False) -> float:
    """Seconds one collective may wait for its peers, proportionate to the job.

    On the shipped models a step takes milliseconds to a second, so a collective that waits a
    minute is a rank that will never come (a mismatch), not a slow one: 60 s for the tiny
    models, 180 s for gpt-small, an hour for a real-scale model trained for real (CPU workers
    take minutes per step), plus the seconds a deliberate input delay adds per step
    (`loader_delay_s` × micro-batches); at least 300 s on GPUs, where NCCL's first collective
    sets up its communicators."""
    seconds = 180.0 if cfg.model == "gpt-small" else 60.0
    if shape:  # fake tensors: a rank of a real-scale model spends seconds per step on the host
        seconds = 600.0
    elif cfg.model in SHAPE_MODELS:  # real tensors at real scale: minutes per step on CPU workers
        seconds = 3600.0
    delay = cfg.options.get("loader_delay_s") or 0.0
    seconds += 4 * float(delay) * cfg.micro_batches
    return max(seconds, 300.0) if mode == "gpu" else seconds


def check_outputs(*, json_path=None, trace_path=None, weights_path=None, torch_profile_dir=None) -> None:
    """Every file a run will write can be written — checked before it trains, so a typo in a
    path does not throw a finished run away (ValueError naming the path and the fix); two of
    them naming the same file would overwrite each other, and are refused too."""
    files = (("record (--json)", json_path), ("trace (--trace)", trace_path),
             ("weights (--save-weights)", weights_path))
    for what, path in files:
        if path is not None:  # "" too: an empty path is refused, not taken for "none"
            check_output(path, what=what)
    check_distinct(files)
    if torch_profile_dir is not None:
        check_output(torch_profile_dir, what="torch.profiler folder (--profile-torch)", directory=True)


def check_batch(cfg: RunConfig, ranks: int) -> None:
    """Every rank that takes a slice of the batch gets the same number of whole micro-batches."""
    m = cfg.layout.num_micro_batches
    per = ranks * m
    if cfg.global_batch % per:
        good = per * max(1, round(cfg.global_batch / per))
        raise ValueError(
            f"global_batch={cfg.global_batch} does not split into {ranks} data ranks × "
            f"micro_batches={m}; use a global batch that is a multiple of {per} "
            f"(e.g. {good}), or change the number of workers or micro-batches.")


LAYOUT_FIELDS = ("dp", "tp", "pp", "cp", "ep", "schedule", "v", "zero", "sp", "checkpointing", "dtype", "stage_layers",
                 "num_micro_batches")


def resolve_layout(strat: Strategy, cfg: RunConfig, workers: int | None,
                   overrides: dict | None = None) -> tuple[Layout, ParallelDims]:
    """The validated layout of `strat` on `workers` ranks with the user's `overrides`
    (dp, pp, schedule, v …), and the mesh shape built from it; raises ValueError saying what
    to change. What the run's knobs ask of the layout — `micro_batches`, `-o v=K` — is read
    here and nowhere after: from here on the layout says it."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if cfg.options.get("v") is not None:  # the pipeline knob `-o v=K`: the same field as --v
        overrides.setdefault("v", cfg.options["v"])
    unknown = set(overrides) - set(LAYOUT_FIELDS)
    if unknown:
        raise ValueError(f"unknown layout field(s) {sorted(unknown)}; use {', '.join(LAYOUT_FIELDS)}.")
    if overrides.get("zero", 0) != 0:
        raise ValueError(f"zero={overrides['zero']!r} is not available as a layout override: the ZeRO "
                         f"stage comes with its strategy — run zero1, zero2, zero3 or fsdp2.")
    if workers is None:
        dims = {k: overrides.get(k, 1) for k in AXES}
        workers = (math.prod(dims.values()) if set(AXES) & set(overrides)
                   else strat.default_workers)
    base = strat.layout(workers)
    degrees = {k: overrides.get(k, getattr(base, k)) for k in AXES}
    # the strategy's own degree, if left out, is inferred from the worker count
    # (pp-1f1b --dp 2 on 4 workers: pp=2; dp-naive --tp 2 on 4: dp=2; tp --dp 2 on 4: tp=2)
    if math.prod(degrees.values()) != workers:
        free = [k for k in AXES if k not in overrides]
        own = [k for k in free if getattr(base, k) > 1]
        pick = (own if len(own) == 1 else free if len(free) == 1
                else ["dp"] if "dp" in free and "dp" in own else [])  # hybrid: dp takes the rest
        if pick:
            others = math.prod(d for k, d in degrees.items() if k != pick[0])
            degrees[pick[0]] = max(1, workers // others)
    check_inner_axes(strat, cfg, degrees, workers)
    # cp and ep are cut inside the mesh's dp axis: it counts every data rank (`runtime.dims`)
    dims = ParallelDims(dp=degrees["dp"] * degrees["cp"] * degrees["ep"], tp=degrees["tp"],
                        pp=degrees["pp"], cp=degrees["cp"], ep=degrees["ep"],
                        world_size=workers)  # raises with what to change
    if base.tp > 1 and degrees["tp"] == 1 and "tp" not in strat.composes:
        raise ValueError(f"{strat.name} splits layers over tensor-parallel ranks; it needs tp >= 2 "
                         f"(got tp=1 on {workers} workers). Give --tp 2 (or more workers).")
    schedule = overrides.get("schedule", base.schedule)
    if strat.schedule and schedule != strat.schedule:
        raise ValueError(f"{strat.name} runs the {strat.schedule!r} schedule; for {schedule!r} run the "
                         f"pipeline strategy of that schedule (`mgpukit list`).")
    if degrees["tp"] > 1 and not base.tp > 1 and "tp" not in strat.composes:
        raise ValueError(f"{strat.name} cannot be combined with tensor parallelism (tp={degrees['tp']}); "
                         f"{combinable('tp')}.")
    sp = bool(overrides.get("sp", base.sp))
    if sp and degrees["tp"] == 1:
        raise ValueError("sequence parallelism (sp) splits the tensor-parallel group's work; it needs tp > 1.")
    if degrees["tp"] > 1 and degrees["pp"] > 1:
        if strat.tensor == "native" or strat.pipeline == "native":
            raise ValueError(f"tp={degrees['tp']} with pp={degrees['pp']} composes the kit's own tensor-parallel "
                             f"layers and pipeline executor; {strat.name} uses PyTorch's. Run hybrid "
                             f"(`mgpukit run hybrid --tp {degrees['tp']} --pp {degrees['pp']}`).")
    if degrees["tp"] > 1 and not cfg.is_gpt:
        raise ValueError(f"tensor parallelism splits the GPT's attention heads and MLP; model "
                         f"{cfg.model!r} is not a GPT (use gpt-tiny or gpt-small).")
    if degrees["tp"] > 1:
        check_divides(cfg.model_config(), degrees["tp"], sp=sp)
    if degrees["pp"] > 1 and not strat.schedule and "pp" not in strat.composes:
        raise ValueError(f"{strat.name} cannot be combined with pipeline parallelism (pp={degrees['pp']}); "
                         f"{combinable('pp')}"
                         + (f"; tensor × pipeline parallel is hybrid (`mgpukit run hybrid --tp "
                            f"{degrees['tp']} --pp {degrees['pp']}`)." if degrees["tp"] > 1 else "."))
    if degrees["dp"] > 1 and strat.schedule is None and "dp" not in strat.composes:
        raise ValueError(f"{strat.name} runs on one replica; it cannot take dp={degrees['dp']}.")
    pp = degrees["pp"]
    stage_layers = overrides.get("stage_layers")
    if stage_layers is not None:  # an uneven pipeline split, layers per stage
        if pp == 1:
            raise ValueError(f"stage_layers={stage_layers!r} splits a pipeline; it needs pp > 1.")
        try:
            parts = stage_layers.split(",") if isinstance(stage_layers, str) else stage_layers
            stage_layers = tuple(int(x) for x in parts)
        except (TypeError, ValueError):
            raise ValueError(f"stage_layers={stage_layers!r}: give the layers of each pipeline stage as "
                             f"whole numbers, e.g. (4, 4, 3, 1) or '4,4,3,1'.") from None
    # micro-batches: the layout's `num_micro_batches` if asked there (1 included: a pipeline
    # then runs one micro-batch), else `micro_batches` (1: a pipeline picks its own, `plan_for`)
    m = overrides.get("num_micro_batches")
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise ValueError(f"num_micro_batches={m!r}: give a whole number >= 1.")
    if pp > 1:  # m, v (and an uneven split) checked
        plan = plan_for(schedule, cfg, pp, degrees["dp"], overrides.get("v"), stage_layers, m=m)
        m, v = plan.m, plan.v
    else:
        if "v" in overrides and overrides["v"] != 1:
            raise ValueError(f"v={overrides['v']} (model chunks per pipeline rank) needs pp > 1.")
        if overrides.get("schedule") is not None:  # was ignored without a pipeline
            raise ValueError(f"schedule={overrides['schedule']!r} is a pipeline schedule: it needs pp > 1 "
                             f"(--pp); drop it, or add --pp.")
        m, v = (cfg.micro_batches if m is None else m), 1
    # rows per micro-batch (whether they divide evenly is checked with the batch, in `prepare`)
    rows = max(1, cfg.global_batch // (degrees["dp"] * degrees["ep"] * m))
    policies = {k: overrides[k] for k in ("checkpointing", "dtype") if k in overrides}
    knobs = strat.layout_knobs(cfg.options) if strat.layout_knobs else {}
    layout = dataclasses.replace(base, **degrees, schedule=schedule if pp > 1 else base.schedule, v=v,
                                 sp=sp, micro_batch=rows, num_micro_batches=m, stage_layers=stage_layers,
                                 **policies, **knobs)
    check_checkpointing(layout.checkpointing, cfg, strat)
    check_precision(layout.dtype)
    if layout.dtype != "fp32" and strat.worker is not None:
        raise ValueError(f"{strat.name} runs its own worker loop, outside the appliers; it cannot take "
                         f"dtype={layout.dtype!r}. Use dtype='fp32'.")
    return layout, dims


AXES = ("dp", "tp", "pp", "cp", "ep")  # the layout's degrees; their product is the world


def check_inner_axes(strat: Strategy, cfg: RunConfig, degrees: dict, workers: int) -> None:
    """cp and ep come with their strategies (`run cp`, `run ep`), each beside dp only; the
    strategy checks its own sizes (`Strategy.validate`)."""
    for axis, name in (("cp", "cp"), ("ep", "ep")):
        if degrees[axis] > 1 and getattr(strat.layout(strat.default_workers), axis) == 1:
            raise ValueError(f"{axis}={degrees[axis]} comes with its strategy: run `mgpukit run {name} "
                             f"--{axis} {degrees[axis]}` (with --dp for data parallelism beside it).")
    own = [a for a in ("cp", "ep") if getattr(strat.layout(strat.default_workers), a) > 1]
    if own and (degrees["tp"] > 1 or degrees["pp"] > 1):
        raise ValueError(f"{strat.name} composes with data parallelism only (--dp); drop --tp/--pp.")
    if own and degrees[own[0]] == 1:
        raise ValueError(f"{strat.name} needs {own[0]} >= 2 (got {own[0]}=1 on {workers} workers); "
                         f"give --{own[0]} 2 or more workers.")


def combinable(axis: str) -> str:
    """Which strategies combine with `axis`, from their declarations: those that list it in
    `Strategy.composes`, and those whose own default layout uses it (taking --dp beside it)."""
    every = strategies.available()
    joins = sorted(s.name for s in every if axis in s.composes)
    owns = sorted(s.name for s in every if axis not in s.composes
                  and getattr(s.layout(s.default_workers), axis) > 1)
    return (f"composable with {axis}: {', '.join(joins)}, or a strategy with {axis} of its own "
            f"({', '.join(owns)}) with --dp")


