"""``mgpukit plan``: the analytical cost model from the command line.

    mgpukit plan --model 70b --gpus 64 --profile h100-nvlink --dp 8 --tp 8 --pp 1 \\
                 --zero 1 --micro-batch 1 --global-batch 512 --ckpt selective
    mgpukit plan --model 70b --gpus 64 --profile h100-ib --global-batch 512 --search
    mgpukit plan --layers 70 --hidden 14336 --heads 112 --vocab 250880 --seq 2048 --positions alibi \\
                 --tied-embeddings --gpus 384 --profile a100-opa --global-batch 2048 --search
    mgpukit plan --model-file my.toml --gpus 1024 --dtype fp8 --framework fsdp --search
    mgpukit plan --model mixtral-8x7b --gpus 64 --profile h100-ib --tp 2 --ep 8 --global-batch 256
    mgpukit plan --model 7b --experts 8 --top-k 2 --gpus 64 --global-batch 256 --search
    mgpukit plan ... --json plan.json
    mgpukit plan --validation      # the published runs behind the error bars

The model is a shipped file (``--model 70b``: ``data/models/70b.toml``), your own file
(``--model-file``) or its sizes (``--layers --hidden --heads --vocab --seq`` and the rest);
sizes given with a ``--model`` change that model; ``--experts --top-k --expert-ffn`` make its MLPs a
mixture of experts (FLOPs of the ``top-k`` a token runs, memory of all of them, split by ``--ep``). Every figure printed is a prediction of the
closed-form model, never a measurement, and carries the planner's error bar: the spread of its
errors on published runs of the same framework (``mgpukit.costmodel.validation``).
``register(subparsers)`` adds the subcommand to the main CLI; ``main(argv)`` runs it alone.
"""
# This module is the command: its flags, what runs, the JSON. The flags become a model and a layout
# in `plan_args`; the tables it prints are `plan_format`. (The docstring above is `plan --help`.)

from __future__ import annotations

import argparse
import json
import sys

from mgpukit.files import OutputError, write_text

from mgpukit.costmodel.attention_kernels import with_attention_kernel
from mgpukit.costmodel.frameworks import DP_SYNC, get_framework, list_frameworks
from mgpukit.costmodel.hardware import list_profiles, load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.commands.plan_args import (budget, check_positive, check_search_args, planned_layout,
                                        shape_from_args)
from mgpukit.commands.plan_format import format_plan, format_search
from mgpukit.costmodel.planner import plan, search
from mgpukit.costmodel.shapes import NORMS, POSITIONS, list_shapes
from mgpukit.costmodel.error_bars import format_error_bars, validation_report
from mgpukit.costmodel.validation import format_validation, predict, runs
from mgpukit.costmodel.training_cost import format_training, format_training_table, time_to_train
from mgpukit.run_args import add_layout_arguments

SEARCH_GLOBAL_BATCH = 512


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help=f"a shipped model: {', '.join(list_shapes())} (default 7b), or a model file's path")
    m = p.add_argument_group("any GPT/Llama-style model, dense or a mixture of experts (alone, or changing --model / --model-file)")
    m.add_argument("--model-file", default=None, metavar="FILE.toml",
                   help="a model file, keys as data/models/*.toml (layers, hidden, heads, ...)")
    for flag, what in (("layers", "transformer layers"), ("hidden", "hidden size d_model"),
                       ("heads", "attention heads"), ("kv-heads", "key/value heads (GQA; default = heads)"),
                       ("ffn", "MLP inner size (default 4 × hidden)"), ("vocab", "vocabulary size"),
                       ("seq", "training sequence length")):
        m.add_argument(f"--{flag}", type=int, default=None, help=what)
    m.add_argument("--gated-mlp", action=argparse.BooleanOptionalAction, default=None,
                   help="SwiGLU MLP: three ffn-wide matrices (Llama)")
    m.add_argument("--norm", choices=NORMS, default=None, help="layernorm (GPT) or rmsnorm (Llama)")
    m.add_argument("--positions", choices=POSITIONS, default=None,
                   help="learned (a position table, GPT) or rotary / alibi (no table)")
    m.add_argument("--tied-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="the output layer shares the token embedding")
    m.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None, help="biases on the linears")
    m.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=None,
                   help="dropout layers (their masks are stored)")
    m.add_argument("--experts", type=int, default=None,
                   help="mixture of experts: experts per block (default 1: a dense MLP)")
    m.add_argument("--top-k", type=int, default=None, help="experts each token is routed to (at most --experts)")
    m.add_argument("--expert-ffn", type=int, default=None, help="each expert's inner width (default --ffn)")
    m.add_argument("--capacity-factor", type=float, default=None,
                   help="expert slots per sequence = ceil(f · top-k · seq / experts) (default 1.25, Switch's)")
    p.add_argument("--gpus", type=int, default=8, help="number of GPUs (default 8)")
    p.add_argument("--profile", default="h100-nvlink",
                   help=f"hardware profile: {', '.join(list_profiles())}, or a .toml path (default h100-nvlink)")
    add_layout_arguments(p, planner=True)  # the layout flags `run` takes too (mgpukit.run_args)
    p.add_argument("--global-batch", type=int, default=None,
                   help=f"sequences per step (default: dp·micro-batch·micro-batches; {SEARCH_GLOBAL_BATCH} with --search)")
    p.add_argument("--micro-batches", type=int, default=None,
                   help="micro-batches per replica when --global-batch is not given (default 4·pp, or 1 without pp)")
    p.add_argument("--framework", default=None, choices=list_frameworks(),
                   help="the implementation: its dp-sync convention, pipeline sends and kernels "
                        "(data/frameworks/*.toml; default megatron-core)")
    p.add_argument("--dp-sync", default=None, choices=DP_SYNC,
                   help="when the data-parallel gradient sync runs: overlapped with backward, or after the "
                        "pipeline flush (Megatron-LM 2021, DeepSpeed's pipeline engine); default: the framework's")
    p.add_argument("--no-stragglers", dest="stragglers", action="store_false",
                   help="every GPU at the profile's rate: leave out the slowest-of-N term (straggler)")
    p.add_argument("--search", action="store_true", help="rank every layout that fits by predicted step time")
    p.add_argument("--top", type=int, default=10, help="rows of the --search table (default 10)")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.add_argument("--validation", action="store_true",
                   help="print the published runs the error bars come from, beside the planner's predictions")
    cost = p.add_argument_group("time to train and cost (mgpukit.costmodel.training_cost)")
    cost.add_argument("--tokens", default=None, help="tokens to train on, e.g. 2e12, 2T, 300B")
    cost.add_argument("--epochs", type=float, default=None, help="or: passes over a dataset of --dataset-tokens")
    cost.add_argument("--dataset-tokens", default=None, help="the dataset's size in tokens, with --epochs")
    cost.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="USD",
                      help="price of one GPU-hour: adds the cost of the run")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``plan`` to an ``argparse`` subparsers object; the handler is ``args.func(args)``."""
    p = subparsers.add_parser("plan", help="predict memory, step time and MFU of a parallel layout",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Handler of ``mgpukit plan``: prints a table, optionally writes JSON; returns the exit code."""
    try:
        if getattr(args, "validation", False):
            return _validation(args)
        check_positive(args)
        shape, profile = shape_from_args(args), load_profile(args.profile)
        framework = get_framework(getattr(args, "framework", None))
        if getattr(args, "dp_sync", None):
            framework = framework.with_(dp_sync=args.dp_sync)
        tokens, price = budget(args), getattr(args, "price_per_gpu_hour", None)
        kernel = getattr(args, "attention_kernel", "")
        if args.search:  # the search's layouts charge the profile's table: give it the kernel's
            profile = with_attention_kernel(profile, kernel)
            check_search_args(args)
            gb = args.global_batch or SEARCH_GLOBAL_BATCH
            plans = search(shape, args.gpus, profile, global_batch=gb, top=args.top, include_unfit=True,
                           dtype=args.dtype or Layout.dtype, framework=framework,
                           flash_attention=getattr(args, "flash", True),
                           tp=args.tp, pp=args.pp, stragglers=getattr(args, "stragglers", True))
            if not plans and (args.tp or args.pp):
                what = " ".join(f"--{k} {getattr(args, k)}" for k in ("tp", "pp") if getattr(args, k))
                raise ValueError(f"no layout has {what}: tp must divide the heads ({shape.n_head}, kv {shape.kv_heads}) "
                                 f"and the GPUs and stay within a node ({profile.gpus_per_node}); pp at most the "
                                 f"layers ({shape.n_layer}) and dividing GPUs / tp; drop or change it")
            print(format_search(plans, gpus=args.gpus, global_batch=gb))
            result = {"predicted": True, "model": shape.name, "profile": profile.name, "gpus": args.gpus,
                      "framework": framework.name, "global_batch": gb, "plans": [pl.to_dict() for pl in plans]}
            if tokens is not None and plans:
                budgets = [time_to_train(pl, tokens, price_per_gpu_hour=price) for pl in plans]
                print("\n" + format_training_table(plans, budgets))
                for row, b in zip(result["plans"], budgets):
                    row["training"] = b
        else:
            result_plan = plan(shape, args.gpus, profile, planned_layout(args), framework=framework,
                               stragglers=getattr(args, "stragglers", True))
            print(format_plan(result_plan))
            result = result_plan.to_dict()
            if tokens is not None:
                result["training"] = time_to_train(result_plan, tokens, price_per_gpu_hour=price)
                print(format_training(result["training"]))
    except ValueError as e:  # LayoutError and unknown names included: say what to change
        if getattr(args, "debug", False):
            raise
        print(f"mgpukit: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return _write_json(args, result)


def _write_json(args, result: dict) -> int:
    if args.json:
        try:  # atomic: a full disk or `ulimit -f` leaves an older file whole (mgpukit.files)
            write_text(args.json, json.dumps(result, indent=2) + "\n", what="plan (--json)")
        except OutputError as e:
            if getattr(args, "debug", False):
                raise
            print(f"mgpukit: error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.json}")
    return 0


def _validation(args) -> int:
    """``--validation``: the table of published runs and each framework's error bar; any model or
    layout flag beside it would be ignored, so it is refused."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    # each flag as it is typed (--ckpt, --no-flash), not its dest: argparse keeps them in `_actions`
    given = [a.option_strings[0] for a in defaults._actions
             if a.option_strings and a.dest not in ("help", "validation", "json", "stragglers")
             and getattr(args, a.dest, a.default) != a.default]
    if given:
        raise ValueError(f"--validation prints the published runs and error bars only, so {', '.join(given)} "
                         f"would be ignored; drop {'them' if len(given) > 1 else 'it'}")
    rows = None if getattr(args, "stragglers", True) else tuple(predict(r, stragglers=False) for r in runs())
    print(f"{format_validation(rows)}\n\n{format_error_bars()}\n(published figures and their sources: "
          f"mgpukit/costmodel/validation.py; predicted: the planner's"
          + ("; --no-stragglers: the table without the slowest-of-N term, the error bars as shipped, with it)"
             if rows else ")"))
    return _write_json(args, validation_report(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpukit plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
