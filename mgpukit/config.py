"""`RunConfig`: what one experiment trains — model, data, optimizer, steps — and its knobs.

The parallel layout is not kept here beside it: `micro_batches` and `layout` are what was asked,
and `mgpukit.prepare` resolves them once into the run's `Layout`, which the workers then read
(`ctx.layout`). A record's `config` is this object as a dict, so `RunConfig(**record["config"])`
rebuilds it (studies/compression.py, notebook 03, saved records).

Why the two stay fields: `micro_batches` is the experiment's gradient accumulation as asked,
which the single-process reference also trains with (`experiment._reference_config` drops the
layout, not it; `fits` predicts that reference from it) — a pipeline asked for 1 runs 2p, its
reference runs 1, so the asked value is not the layout's `num_micro_batches` and must outlive
resolution. `layout` as given is a request (a saved record's resolved layout re-applies as
overrides); the record's `config` carries both under these keys, which its readers rebuild."""
from __future__ import annotations

import dataclasses
import json
import math

from mgpukit.costmodel.layout import Layout


MODELS = ("gpt-tiny", "gpt-small", "gpt-moe", "mlp-tiny", "mlp-wide",
          "gpt2-124m", "gpt2-350m", "gpt2-1.3b", "llama-7b", "mixtral-8x7b")
# real-scale models: fake tensors in shape mode (`mgpukit.measure.shape`), or real ones after the
# memory check (`mgpukit.fits`; data: the shipped data/tinytext.txt)
SHAPE_MODELS = ("gpt2-124m", "gpt2-350m", "gpt2-1.3b", "llama-7b", "mixtral-8x7b")
# the GPTs (and the Llama-sized GPT): what tensor parallelism splits (heads, MLP columns)
GPT_MODELS = tuple(m for m in MODELS if not m.startswith("mlp"))
# mixture-of-experts GPTs (`models.moe`): their MLPs are routed experts
MOE_MODELS = ("gpt-moe", "mixtral-8x7b")
# the GPTs whose every block is dense (what tensor and context parallelism split)
DENSE_GPT_MODELS = tuple(m for m in GPT_MODELS if m not in MOE_MODELS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    model: str = "gpt-tiny"
    steps: int = 20
    global_batch: int = 8  # sequences (GPT) or rows (MLP) per optimizer step, over all ranks
    # micro-batches per step per data-parallel rank, as asked (1: a pipeline picks 2p). What a run
    # uses is its layout's `num_micro_batches`, resolved once before launch (`mgpukit.prepare`)
    micro_batches: int = 1
    # SGD with momentum by default: parity with the single-process reference then holds at
    # torch's fp32 tolerances for the whole run. Adam divides by sqrt(v), which amplifies the
    # last-bit differences of a different summation order (2 half-batch gradients averaged vs
    # one full-batch gradient) until weights drift past 1e-5 — exact algorithm, inexact floats.
    lr: float = 0.1
    optimizer: str = "sgd"  # "sgd" | "adamw"
    seed: int = 0
    options: dict = dataclasses.field(default_factory=dict)  # strategy knobs (bucket_mb, …)
    # the parallel layout (dp, tp, pp, schedule, v, m, …): as given, a request (its fields are
    # overrides); after `mgpukit.prepare`, the resolved one — the same object every worker's
    # context carries (`ctx.layout`) and the cost model predicts from
    layout: Layout | None = None

    def __post_init__(self):
        if isinstance(self.layout, dict):  # from a saved record
            object.__setattr__(self, "layout", Layout(**self.layout))
        if self.model not in MODELS:
            raise ValueError(f"model={self.model!r} is not one of {MODELS}.")
        if self.optimizer not in ("adamw", "sgd"):
            raise ValueError(f"optimizer={self.optimizer!r}: use 'adamw' or 'sgd'.")
        for name in ("steps", "global_batch", "micro_batches", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name}={value!r}: must be a whole number.")
            if value < (0 if name == "seed" else 1):
                raise ValueError(f"{name} must be at least {0 if name == 'seed' else 1}, got {value}.")
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            raise ValueError(f"lr={lr!r}: the learning rate must be a finite number >= 0 (e.g. 0.1).")
        if not isinstance(self.options, dict):
            raise ValueError(f"options={self.options!r}: give a dict of strategy knobs, e.g. {{'bucket_mb': 1}}.")

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def key(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, default=str)

    @property
    def is_gpt(self) -> bool:
        return self.model in GPT_MODELS  # the GPTs, and the Llama-sized GPT

    def model_config(self):
        from mgpukit import models as m  # lazy: a RunConfig is made without importing torch (the CLI's)

        # each name of MODELS has its builder in mgpukit.models: "gpt2-1.3b" -> gpt2_1_3b(),
        # sized by the `model_sizes` knob if given ({"n_layers": 8}: the builders take overrides)
        build = getattr(m, self.model.replace("-", "_").replace(".", "_"))
        return build(**(self.options.get("model_sizes") or {}))

    def tokens_per_step(self) -> int:
        """Tokens (GPT) or rows (MLP) one optimizer step consumes, over all ranks."""
        return self.global_batch * (self.model_config().seq_len if self.is_gpt else 1)


