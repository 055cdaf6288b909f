"""Typed strategy knobs: what `-o KEY=VALUE` (and `RunConfig.options`) may say, checked early.

Every strategy declares its knobs; the ones every strategy shares are declared here by who
reads them: the loop (`TRAINER_KNOBS`: the input pipeline, fp16's scaler), the hooks an
experiment installs around it (`HOOK_KNOBS`: a straggler, the learning-rate rule, checkpoints),
the model builder (`MODEL_KNOBS`). An unknown key, or a value of the wrong
type, is refused before anything launches, with the list of valid knobs.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class Knob:
    name: str
    type: type  # int | float | bool | str | dict
    default: Any
    help: str
    choices: tuple | None = None
    minimum: float | None = None  # inclusive lower bound for numbers
    maximum: float | None = None  # inclusive upper bound for numbers
    above: float | None = None  # exclusive lower bound (a fraction in (0, 1]: above=0, maximum=1)


# what the loop itself reads (`training/trainer.py`, its loader and fp16's scaler)
TRAINER_KNOBS = (
    # at most a minute a batch: the slow-loader lesson uses tenths of a second; 1e9 was accepted
    Knob("loader_delay_s", float, 0.0, "seconds each batch takes to load", minimum=0, maximum=60),
    Knob("prefetch", int, 0, "batches a background thread keeps ready (true = 2)", minimum=0),
    Knob("batch_split", str, None, "rows per dp rank, e.g. '24,8': unequal batches, exact gradient (training/hetero.py)"),
    Knob("loss_scale_init", float, 2.0 ** 16, "fp16: the loss scaler's starting scale S (policies/precision.py)",
         minimum=1),
)

# what the hooks read that an experiment installs around the loop (`knob_hooks.hooks_for`,
# `training/hooks.py`; checkpoints: `training/checkpoint.py`): the loop never sees these
HOOK_KNOBS = (
    Knob("straggler", dict, None, 'one slow rank: {"rank": 1, "factor": 3}'),
    Knob("show_idle", bool, False, "record the wait for the slowest rank as idle"),
    Knob("rank_profiles", str, None, "emulated: each rank's compute profile, e.g. 'a100-nvlink,h100-nvlink'"),
    Knob("drop_slowest", int, 0, "backup workers: the k dp ranks measured slowest skip their compute "
         "(full steps warm up, time and re-time every rank: training/backup.py)",
         minimum=0),
    Knob("lr_scaling", str, None, "'linear': Goyal et al.'s rule for the global batch",
         choices=("linear", "none")),
    Knob("warmup_steps", int, 0, "steps of linear warmup to the scaled rate", minimum=0),
    Knob("base_batch", int, None, "the global batch the learning rate was tuned for", minimum=1),
    Knob("checkpoint_dir", str, None, "folder for torch.distributed.checkpoint saves (training/checkpoint.py)"),
    Knob("checkpoint_every", int, 0, "save every k steps (0: only after the last step)", minimum=0),
    Knob("resume", bool, False, "start from the latest checkpoint in checkpoint_dir"),
    Knob("keep_checkpoints", int, 3, "the newest k checkpoints kept in checkpoint_dir (older ones deleted)",
         minimum=1),
)

# what the model builder reads (`RunConfig.model_config`, `training/building.py`)
MODEL_KNOBS = (
    Knob("model_sizes", dict, None, '{"n_layers": 8, "d_hidden": 256}: the model\'s sizes, overriding its '
         "config (the builders take overrides: a square MLP for a pipeline's schedule)"),
    Knob("input_grad", bool, False, "the input batch requires a gradient (MLP models): a pipeline's first "
         "stage computes dx like every other stage"),
)


def check_options(options: dict, knobs: tuple[Knob, ...], *, strategy: str) -> dict:
    """`options` with each value checked against its knob; raises ValueError naming the valid ones."""
    by_name = {k.name: k for k in knobs}
    out = {}
    for key, value in options.items():
        knob = by_name.get(key)
        if knob is None:
            valid = ", ".join(sorted(by_name)) or "none"
            raise ValueError(f"unknown option {key!r} for strategy {strategy!r}; valid options: {valid}.")
        out[key] = _coerce(knob, value, strategy)
    return out


def _coerce(knob: Knob, value, strategy: str):
    if value is None:
        return None
    where = f"option {knob.name}={value!r} ({strategy})"
    t = knob.type
    if t is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: use true or false.")
        return value
    if t is int:
        if knob.name == "prefetch" and value is True:
            return 2
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: must be an integer — {knob.help}.")
    elif t is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}: must be a finite number — {knob.help}.")
        value = float(value)
    elif t is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: must be a string — {knob.help}.")
    elif t is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: must be an object like {knob.help}.")
    if knob.choices is not None and value not in knob.choices:
        raise ValueError(f"{where}: choose one of {', '.join(map(str, knob.choices))}.")
    if knob.minimum is not None and value < knob.minimum:
        raise ValueError(f"{where}: must be at least {knob.minimum:g} — {knob.help}.")
    if knob.above is not None and value <= knob.above:
        raise ValueError(f"{where}: must be more than {knob.above:g} — {knob.help}.")
    if knob.maximum is not None and value > knob.maximum:
        raise ValueError(f"{where}: must be at most {knob.maximum:g} — {knob.help}.")
    return value
