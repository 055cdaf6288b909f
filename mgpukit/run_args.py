"""The flags of a training run, defined once.

`mgpukit run`, `mgpukit tour` and the scripts `mgpukit export` writes add the same arguments
with these functions and read them back with `config_from_args` / `layout_from_args`, so a flag
means the same thing wherever a learner meets it (`--dp 2 --pp 2` on the command line, in a
notebook's `mgpukit.run(..., layout=...)`, under `torchrun`).
"""
from __future__ import annotations

import argparse

from mgpukit.argtypes import key_value, positive_int
from mgpukit.config import MODELS, SHAPE_MODELS, RunConfig
from mgpukit.costmodel.actions import SCHEDULES

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


# What `mgpukit plan` predicts beside what `run` trains: fp8 GEMMs (Transformer Engine's recipe).
RUN_DTYPES = ("fp32", "bf16", "fp16")
PLAN_DTYPES = ("bf16", "fp16", "fp8", "fp32")


def add_layout_arguments(p, *, planner: bool = False) -> None:
    """The parallel layout: each degree, the pipeline schedule, the memory and precision policies.

    The one definition of the layout flags, for `run`, the exported scripts and `plan`. For
    `run` a flag left out is the strategy's choice; for `plan` (``planner=True``) it is the
    planner's default (dp fills the GPUs, 1f1b, bf16, no checkpointing), the degrees are whole
    numbers the planner bounds by a cluster's size (`commands.plan_args.check_positive`),
    fp8 GEMMs can be predicted, checkpointing is spelled `--ckpt`, and the knobs only a
    prediction takes are added: the ZeRO stage, the micro-batch size, uneven stages, tp overlap,
    unfused attention."""
    count = int if planner else positive_int
    title = ("parallel layout (default: dp fills the GPUs the other degrees leave)" if planner
             else "parallel layout (default: the strategy's)")
    layout = p.add_argument_group(title)
    layout.add_argument("--dp", type=count, default=None, help="data-parallel degree")
    layout.add_argument("--tp", type=count, default=None, help="tensor-parallel degree"
                        + (" (default 1; with --search: only this tp)" if planner else ""))
    layout.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None,
                        help="sequence parallelism in the tensor-parallel group (with --tp"
                        + ("; default: on when tp > 1)" if planner else ")"))
    layout.add_argument("--pp", type=count, default=None, help="pipeline-parallel degree"
                        + (" (default 1; with --search: only this pp)" if planner else ""))
    layout.add_argument("--cp", type=count, default=None,
                        help="context-parallel degree: each sequence split, ring attention"
                        + (" (default 1)" if planner else " (run cp)"))
    layout.add_argument("--ep", type=count, default=None,
                        help="expert-parallel degree: each MoE block's experts split over ep ranks, all-to-all"
                        + (" (default 1)" if planner else " (run ep)"))
    layout.add_argument("--schedule", default=None, choices=SCHEDULES if planner else None,
                        help="pipeline schedule with --pp: " + " | ".join(SCHEDULES)
                        + (" (default 1f1b)" if planner else ""))
    layout.add_argument("--v", type=count, default=None, help="model chunks per pipeline rank"
                        + (" for 'interleaved' (default 2)" if planner else ""))
    ckpt_help = "activation checkpointing: every block (full) or the attention core (selective)"
    if planner:
        ckpt_help += (" (default none; selective saves the s×s scores only with --no-flash: flash "
                      "attention never stores them)")
    layout.add_argument("--ckpt" if planner else "--checkpointing", dest="checkpointing", default=None,
                        choices=["none", "full", "selective"], help=ckpt_help)
    layout.add_argument("--dtype", default=None, choices=PLAN_DTYPES if planner else RUN_DTYPES,
                        help="bf16 / fp16: autocast with fp32 master weights (fp16 with dynamic loss scaling)"
                        + ("; fp8: + fp8 GEMMs (H100/H200 only); default bf16" if planner else ""))
    if not planner:
        return
    layout.add_argument("--zero", type=int, default=0, choices=range(4), help="ZeRO stage 0-3 (default 0)")
    layout.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    layout.add_argument("--stage-layers", default=None, metavar="N,N,...",
                        help="layers per pipeline stage, comma-separated (default: n_layer / pp each)")
    layout.add_argument("--tp-overlap", action="store_true",
                        help="overlap tp collectives with the layer's GEMMs")
    layout.add_argument("--no-flash", dest="flash", action="store_false",
                        help="unfused attention: s×s scores through HBM and kept for backward (Megatron-LM "
                             "2021); default flash attention (one log-sum-exp per row kept)")
    layout.add_argument("--attention-kernel", default="", choices=("fa2", "fa3"),
                        help="the fused attention kernel's generation: fa2 (FlashAttention-2, 2023 runs; on H100 "
                             "its rate from the FA3 paper's Fig. 5-6) or fa3 (FlashAttention-3 / cuDNN, Hopper "
                             "only); default: the profile's own (costmodel/attention_kernels.py)")


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
