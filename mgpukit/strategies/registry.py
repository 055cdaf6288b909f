"""The strategy registry: what `mgpukit list` shows and `mgpukit run NAME` runs.

A strategy is a recipe for the one trainer, not a training loop of its own:

- `layout(n)` — how it lays out `n` workers by default (a `costmodel.Layout`: dp, tp, pp, the
  pipeline schedule …); `mgpukit run NAME --dp 2 --pp 2` overrides it;
- `grad_sync(module, ctx, rec, cfg) -> (module, GradSync)` — its gradient synchronisation over
  the data-parallel axis (an applier: bucketed hooks, DDP, a compressed exchange …);
- `schedule` / `pipeline` — for pipeline strategies, the schedule and whose runtime runs it
  (`"ours"`: the kit's executor; `"native"`: torch.distributed.pipelining);
- `tensor` — with tp > 1, who splits the layers (`"ours"`: Megatron-style layers,
  `mgpukit.strategies.tensor_parallel`; `"native"`: DTensor's `parallelize_module`);
- `split` — context / expert parallelism (`cp`, `ep`): rewrites the model in place for a group
  cut inside the dp axis (the sequence, or the experts, split);
- `knobs` — its typed options (`layout_knobs`: the layout fields some of them set).

`mgpukit.parallelize` applies these to an unmodified model and `mgpukit.training.train` runs
it. A strategy with a topology the trainer cannot express (the parameter server) gives a
`worker(ctx, rec, cfg)` instead.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mgpukit.config import MODELS
from mgpukit.costmodel.layout import Layout
from mgpukit.strategies.knobs import HOOK_KNOBS, MODEL_KNOBS, TRAINER_KNOBS, Knob, check_options


def data_parallel(n: int) -> Layout:
    return Layout(dp=n, dtype="fp32")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    family: str
    description: str
    layout: Callable[[int], Layout] = data_parallel
    layout_knobs: Callable[[dict], dict] | None = None  # options -> Layout fields its knobs set
    # (hybrid's zero1 -> zero=1), so the layout the cost model reads says what runs
    grad_sync: Callable | None = None  # (module, ctx, rec, cfg) -> (module, GradSync); None: allreduce
    schedule: str | None = None  # pipeline strategies: the schedule their name promises
    pipeline: str = "ours"  # "ours" | "native": who runs a pipeline schedule
    tensor: str = "ours"  # "ours" | "native": who splits the layers when tp > 1
    split: Callable | None = None  # (model, ctx, rec, cfg) -> training.parts.Split: context or
    # expert parallelism, cut inside the dp axis (`runtime.dims`), rewriting the model in place
    worker: Callable | None = None  # own topology: run(ctx, rec, cfg) -> {"weights": ...}
    knobs: tuple[Knob, ...] = ()
    trainer_knobs: bool = True  # accepts the shared knobs (the loop's, the hooks', the model's)
    composes: tuple[str, ...] = ("dp",)  # axes besides its own it can be combined with
    min_workers: int = 1
    default_workers: int = 2
    reference: str | None = "single"  # what parity compares against (None: no parity)
    theory: Callable | None = None  # (cfg, dims) -> dict of predicted figures
    validate: Callable | None = None  # (cfg, dims) -> None; raises ValueError saying what to change
    batch_ranks: Callable[[int], int] | None = None  # world size -> ranks the batch is split
    # over (default: the dp degree; a parameter server splits it over its n-1 workers)
    tolerance: dict | None = None  # parity tolerance when fp32 defaults can't hold (say why)
    compare: Callable | None = None  # (record, weights, ref, tolerance) -> parity dict, for
    # strategies that change the numbers on purpose (lossy compression compares loss curves)
    emulation: bool = True  # runs under the virtual clock
    models: tuple[str, ...] = MODELS  # the kit's models (`config.SHAPE_MODELS`: real scale)

    def all_knobs(self) -> tuple[Knob, ...]:
        return self.knobs + (TRAINER_KNOBS + HOOK_KNOBS + MODEL_KNOBS if self.trainer_knobs else ())

    def check_options(self, options: dict) -> dict:
        return check_options(options, self.all_knobs(), strategy=self.name)

    def option(self, cfg, name: str):
        """The value of knob `name` in `cfg.options`, or its default."""
        for k in self.all_knobs():
            if k.name == name:
                value = cfg.options.get(name)
                return k.default if value is None else value
        raise KeyError(f"strategy {self.name!r} has no knob {name!r}")


_REGISTRY: dict[str, Strategy] = {}


def register(name: str, **fields) -> Strategy:
    """Add a strategy: `register("dp-bucketed", family=..., grad_sync=..., knobs=...)`."""
    if name in _REGISTRY:
        raise ValueError(f"strategy {name!r} is registered twice.")
    _REGISTRY[name] = Strategy(name=name, **fields)
    return _REGISTRY[name]


def get(name: str) -> Strategy:
    """The strategy `name` (import `mgpukit.strategies` first: it registers every family)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown strategy {name!r}; `mgpukit list` shows these: "
                         f"{', '.join(sorted(_REGISTRY))}.")
    return _REGISTRY[name]


def available() -> list[Strategy]:
    return list(_REGISTRY.values())
