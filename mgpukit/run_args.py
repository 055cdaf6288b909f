"""The flags of a training run, defined once.

`mgpukit run`, `mgpukit tour` and the scripts `mgpukit export` writes add the same arguments
with these functions and read them back with `config_from_args` / `layout_from_args`, so a flag
means the same thing wherever a learner meets it (`--dp 2 --pp 2` on the command line, in a
notebook's `mgpukit.run(..., layout=...)`, under `torchrun`).
"""
from __future__ import annotations

from mgpukit.argtypes import key_value, positive_int
from mgpukit.config import MODELS, SHAPE_MODELS, RunConfig

LAYOUT_FLAGS = ("dp", "tp", "sp", "pp", "cp", "ep", "schedule", "v", "checkpointing", "dtype")


def add_config_arguments(p) -> None:
    """The model, the batch, the optimizer and the strategy's knobs (default: the strategy's)."""
    p.add_argument("--steps", type=positive_int, default=None)
    p.add_argument("--model", default=None, help=" | ".join(MODELS) + " (real scale: "
                   + ", ".join(SHAPE_MODELS) + ", after a memory check, with a progress bar on CPU;"
                   " or with --shape, fake tensors)")
    p.add_argument("--global-batch", type=positive_int, default=None)
    p.add_argument("--micro-batches", type=positive_int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--optimizer", default=None, choices=["sgd", "adamw"])
    p.add_argument("--option", "-o", action="append", type=key_value, metavar="KEY=VALUE",
                   help="strategy knob, e.g. -o bucket_mb=1 (typed; unknown keys are refused)")


def add_layout_arguments(p) -> None:
    """The parallel layout: each degree, the pipeline schedule, the memory and precision policies."""
    layout = p.add_argument_group("parallel layout (default: the strategy's)")
    layout.add_argument("--dp", type=positive_int, default=None, help="data-parallel degree")
    layout.add_argument("--tp", type=positive_int, default=None, help="tensor-parallel degree")
    layout.add_argument("--sp", action="store_true", default=None,
                        help="sequence parallelism in the tensor-parallel group (with --tp)")
    layout.add_argument("--pp", type=positive_int, default=None, help="pipeline-parallel degree")
    layout.add_argument("--cp", type=positive_int, default=None,
                        help="context-parallel degree (run cp: each sequence split, ring attention)")
    layout.add_argument("--ep", type=positive_int, default=None,
                        help="expert-parallel degree (run ep: the MoE experts split, all-to-all)")
    layout.add_argument("--schedule", default=None,
                        help="pipeline schedule with --pp: naive | gpipe | 1f1b | interleaved | zb-h1")
    layout.add_argument("--v", type=positive_int, default=None, help="model chunks per pipeline rank")
    layout.add_argument("--checkpointing", default=None, choices=["none", "full", "selective"],
                        help="activation checkpointing: every block (full) or the attention core (selective)")
    layout.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                        help="bf16 / fp16: autocast with fp32 master weights (fp16 with dynamic loss scaling)")


def layout_from_args(args) -> dict:
    """The layout flags given (None: the strategy's default), for `prepare(..., layout=)`."""
    return {k: getattr(args, k, None) for k in LAYOUT_FLAGS}


def options_from_args(args) -> dict:
    """The `-o KEY=VALUE` knobs as a dict; a key given twice is refused (the last one used to
    win, silently), and so is a layout knob that disagrees with its own flag (`-o v=3 --v 2`)."""
    options = {}
    for key, value in getattr(args, "option", None) or []:
        if key in options:
            raise ValueError(f"-o {key} is given twice ({key}={options[key]!r} and {key}={value!r}); "
                             f"give it once.")
        options[key] = value
    for key, flag in layout_from_args(args).items():
        if flag is not None and key in options and options[key] != flag:
            raise ValueError(f"--{key.replace('_', '-')} {flag} and -o {key}={options[key]!r} disagree; "
                             f"give one of them.")
    return options


def config_from_args(args, options: dict | None = None) -> RunConfig:
    """The run's configuration from the flags given; the others keep `RunConfig`'s defaults."""
    fields = {k: v for k, v in {"steps": args.steps, "model": args.model,
                                "global_batch": args.global_batch, "lr": args.lr,
                                "micro_batches": args.micro_batches,
                                "optimizer": args.optimizer}.items() if v is not None}
    return RunConfig(**fields, options=options_from_args(args) if options is None else options)
