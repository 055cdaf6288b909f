"""``mgpukit plan``: the analytical cost model from the command line.

    mgpukit plan --model 70b --gpus 64 --profile h100-nvlink --dp 8 --tp 8 --pp 1 \\
                 --zero 1 --micro-batch 1 --global-batch 512 --ckpt selective
    mgpukit plan --model 70b --gpus 64 --profile h100-ib --global-batch 512 --search
    mgpukit plan --layers 70 --hidden 14336 --heads 112 --vocab 250880 --seq 2048 --positions alibi \\
                 --tied-embeddings --gpus 384 --profile a100-opa --global-batch 2048 --search
    mgpukit plan --model-file my.toml --gpus 1024 --dtype fp8 --framework fsdp --search
    mgpukit plan ... --json plan.json
    mgpukit plan --validation      # the published runs behind the error bars

The model is a shipped file (``--model 70b``: ``data/models/70b.toml``), your own file
(``--model-file``) or its sizes (``--layers --hidden --heads --vocab --seq`` and the rest);
sizes given with a ``--model`` change that model. Every figure printed is a prediction of the
closed-form model, never a measurement, and carries the planner's error bar: the spread of its
errors on published runs of the same framework (``mgpukit.costmodel.validation``).
``register(subparsers)`` adds the subcommand to the main CLI; ``main(argv)`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import sys

from mgpukit.files import OutputError, write_text

from mgpukit.costmodel.actions import SCHEDULES
from mgpukit.costmodel.frameworks import DP_SYNC, get_framework, list_frameworks
from mgpukit.costmodel.hardware import list_profiles, load_profile
from mgpukit.costmodel.layout import DTYPE_BYTES, Layout
from mgpukit.costmodel.memory import CATEGORIES
from mgpukit.costmodel.planner import Plan, plan, search
from mgpukit.costmodel.shapes import NORMS, POSITIONS, get_shape, list_shapes, shape_from_dict, shape_to_dict
from mgpukit.costmodel.validation import format_error_bars, format_validation, validation_report
from mgpukit.costmodel.training_cost import (check_price, format_training, format_training_table, time_to_train,
                                             token_budget)

SEARCH_GLOBAL_BATCH = 512


SIZE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "gated_mlp", "norm", "positions",
              "tied_embeddings", "bias", "dropout")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help=f"a shipped model: {', '.join(list_shapes())} (default 7b), or a model file's path")
    m = p.add_argument_group("any dense GPT/Llama-style model (alone, or changing --model / --model-file)")
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
    p.add_argument("--gpus", type=int, default=8, help="number of GPUs (default 8)")
    p.add_argument("--profile", default="h100-nvlink",
                   help=f"hardware profile: {', '.join(list_profiles())}, or a .toml path (default h100-nvlink)")
    p.add_argument("--dp", type=int, help="data-parallel degree (default: gpus / (tp·pp))")
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (default 1; with --search: only this tp)")
    p.add_argument("--pp", type=int, default=None, help="pipeline stages (default 1; with --search: only this pp)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel degree: ring attention over seq (default 1)")
    p.add_argument("--stage-layers", default=None, metavar="N,N,...",
                   help="layers per pipeline stage, comma-separated (default: n_layer / pp each)")
    p.add_argument("--tp-overlap", action="store_true", help="overlap tp collectives with the layer's GEMMs")
    p.add_argument("--no-flash", dest="flash", action="store_false",
                   help="unfused attention: s×s scores through HBM and kept for backward (Megatron-LM 2021); "
                        "default flash attention (one log-sum-exp per row kept)")
    p.add_argument("--zero", type=int, default=0, choices=range(4), help="ZeRO stage 0-3 (default 0)")
    p.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None,
                   help="sequence parallelism (default: on when tp > 1)")
    p.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")
    p.add_argument("--v", type=int, default=None, help="model chunks per stage for 'interleaved' (default 2)")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    p.add_argument("--global-batch", type=int, default=None,
                   help=f"sequences per step (default: dp·micro-batch·micro-batches; {SEARCH_GLOBAL_BATCH} with --search)")
    p.add_argument("--micro-batches", type=int, default=None,
                   help="micro-batches per replica when --global-batch is not given (default 4·pp, or 1 without pp)")
    p.add_argument("--ckpt", default="none", choices=("none", "selective", "full"),
                   help="activation checkpointing (default none; selective recomputes the attention core, "
                        "which saves the s×s scores only with --no-flash: flash attention never stores them)")
    p.add_argument("--dtype", default="bf16", choices=tuple(DTYPE_BYTES),
                   help="bf16 / fp16 mixed precision, fp8 GEMMs (H100/H200 only), or fp32 (default bf16)")
    p.add_argument("--framework", default=None, choices=list_frameworks(),
                   help="the implementation: its dp-sync convention, pipeline sends and kernels "
                        "(data/frameworks/*.toml; default megatron-core)")
    p.add_argument("--dp-sync", default=None, choices=DP_SYNC,
                   help="when the data-parallel gradient sync runs: overlapped with backward, or after the "
                        "pipeline flush (Megatron-LM 2021, DeepSpeed's pipeline engine); default: the framework's")
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


_POSITIVE = ("gpus", "dp", "tp", "pp", "cp", "v", "micro_batch", "global_batch", "micro_batches", "top",
             "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq")
# Beyond any cluster (the largest runs use ~10^5 GPUs) and far below where Python's integers stop
# fitting the C doubles and sizes the arithmetic needs: refused in one line instead of an
# OverflowError or a search that never ends.
MAX_COUNT = 10**12


def shape_from_args(args):
    """The model: ``--model`` / ``--model-file`` (default 7b), changed by any size flag given;
    or, with neither, the size flags alone (``--layers --hidden --heads --vocab --seq`` needed)."""
    sizes = {k: getattr(args, k, None) for k in SIZE_FLAGS}
    sizes = {k: v for k, v in sizes.items() if v is not None}
    model, model_file = getattr(args, "model", None), getattr(args, "model_file", None)
    if model is not None and model_file is not None:
        raise ValueError("give --model or --model-file, not both")
    if model_file is not None:
        model = model_file if model_file.endswith(".toml") or "/" in model_file else model_file + ".toml"
    if model is None and not sizes:
        model = "7b"
    if model is None:  # a model from its sizes alone
        return shape_from_dict({"name": "custom", **sizes}, where="the model flags")
    base = get_shape(model)
    if not sizes:
        return base
    d = shape_to_dict(base)
    d.update(sizes)
    d["name"] = f"{base.name} (changed)"
    if "hidden" in sizes and "ffn" not in sizes:
        d.pop("ffn")  # 4 × the new hidden size, not the old model's
    return shape_from_dict(d, where="the model flags")


def layout_from_args(args) -> Layout:
    tp, pp, cp = args.tp or 1, args.pp or 1, getattr(args, "cp", 1)
    if args.dp is None and args.gpus % (tp * pp * cp):
        what = "tp × pp × cp" if cp > 1 else "tp × pp"
        raise ValueError(f"{what} = {tp * pp * cp} does not divide --gpus {args.gpus}; choose degrees whose product does")
    dp = args.dp if args.dp is not None else args.gpus // (tp * pp * cp)
    v = args.v if args.v is not None else (2 if args.schedule == "interleaved" else 1)
    stage_layers = getattr(args, "stage_layers", None)
    if stage_layers is not None:
        try:
            stage_layers = tuple(int(x) for x in stage_layers.split(","))
        except ValueError:
            raise ValueError(f"--stage-layers {stage_layers!r}: give whole numbers separated by commas, "
                             f"one per stage (e.g. 7,9,9,7)") from None
    kw = dict(dp=dp, tp=tp, pp=pp, cp=cp, zero=args.zero, sp=(tp > 1) if args.sp is None else args.sp,
              schedule=args.schedule, v=v, micro_batch=args.micro_batch, checkpointing=args.ckpt, dtype=args.dtype,
              stage_layers=stage_layers, tp_overlap=getattr(args, "tp_overlap", False),
              flash_attention=getattr(args, "flash", True))
    if args.global_batch is not None:
        return Layout.from_global_batch(global_batch=args.global_batch, **kw)
    m = args.micro_batches if args.micro_batches is not None else (4 * pp if pp > 1 else 1)
    return Layout(num_micro_batches=m, **kw)


def _check_positive(args) -> None:
    for name in _POSITIVE:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be at least 1")
        if value is not None and value > MAX_COUNT:
            raise ValueError(f"--{name.replace('_', '-')} {value}: more than 10^12 is beyond any "
                             f"cluster; give a realistic number")


# the layout flags --search chooses itself, with the value that means "not given" (--tp and --pp
# are not among them: with --search they keep only that degree)
_SEARCHED = {"dp": None, "cp": 1, "v": None, "micro_batches": None, "stage_layers": None}


def _check_search_args(args) -> None:
    """--search picks the layout; a layout flag beside it was silently ignored: refuse it."""
    given = [f"--{k.replace('_', '-')} {getattr(args, k)}" for k, unset in _SEARCHED.items()
             if getattr(args, k, unset) != unset]
    if given:
        raise ValueError(f"--search chooses the layout itself, so {', '.join(given)} would be ignored; "
                         f"drop {'them' if len(given) > 1 else 'it'}, or drop --search to predict that "
                         f"one layout")


def _budget(args) -> "float | None":
    """Tokens of the run when --tokens or --epochs/--dataset-tokens are given (checked), else None."""
    price = check_price(getattr(args, "price_per_gpu_hour", None))
    given = [getattr(args, k, None) for k in ("tokens", "epochs", "dataset_tokens")]
    if all(g is None for g in given):
        if price is not None:
            raise ValueError("--price-per-gpu-hour needs a token budget: add --tokens (e.g. 2T) "
                             "or --epochs with --dataset-tokens")
        return None
    return token_budget(tokens=args.tokens, epochs=args.epochs, dataset_tokens=args.dataset_tokens)


def run(args) -> int:
    """Handler of ``mgpukit plan``: prints a table, optionally writes JSON; returns the exit code."""
    try:
        if getattr(args, "validation", False):
            return _validation(args)
        _check_positive(args)
        shape, profile = shape_from_args(args), load_profile(args.profile)
        framework = get_framework(getattr(args, "framework", None))
        if getattr(args, "dp_sync", None):
            framework = framework.with_(dp_sync=args.dp_sync)
        tokens, price = _budget(args), getattr(args, "price_per_gpu_hour", None)
        if args.search:
            _check_search_args(args)
            gb = args.global_batch or SEARCH_GLOBAL_BATCH
            plans = search(shape, args.gpus, profile, global_batch=gb, top=args.top, include_unfit=True,
                           dtype=args.dtype, framework=framework, flash_attention=getattr(args, "flash", True),
                           tp=args.tp, pp=args.pp)
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
            result_plan = plan(shape, args.gpus, profile, layout_from_args(args), framework=framework)
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
    given = [f"--{k.replace('_', '-')}" for k, v in vars(defaults.parse_args([])).items()
             if k not in ("validation", "json") and getattr(args, k, v) != v]
    if given:
        raise ValueError(f"--validation prints the published runs and error bars only, so {', '.join(given)} "
                         f"would be ignored; drop {'them' if len(given) > 1 else 'it'}")
    print(f"{format_validation()}\n\n{format_error_bars()}\n(published figures and their sources: "
          f"mgpukit/costmodel/validation.py; predicted: the planner's)")
    return _write_json(args, validation_report())


# -------------------------------------------------------------------------- formatting


def _bytes(x: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:8.2f} {unit}"
    return f"{x:8.0f} B  "


def _count(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f}"


def _sec(x: float) -> str:
    return f"{x * 1e3:8.1f} ms" if x < 1 else f"{x:8.2f} s "


def _header(pl: Plan) -> list[str]:
    s, hw, fw = pl.model, pl.profile, pl.framework
    kv = f" ({s.kv_heads} kv)" if s.kv_heads != s.n_head else ""
    return [
        f"model    {s.name}: {_count(pl.params)} parameters, {s.n_layer} layers, d_model {s.d_model}, "
        f"{s.n_head} heads{kv}, ffn {s.d_ff}{' gated' if s.gated_mlp else ''}, seq {s.seq_len}, vocab {s.vocab}",
        f"cluster  {pl.gpus} GPUs of profile {hw.name} ({hw.gpus_per_node} per node): {hw.description}",
        f"framework {fw.name}: dp sync {fw.dp_sync}, kernels × {fw.kernel_efficiency:g} "
        f"({fw.description})",
        f"error bar {pl.error_bar.describe()}" + _unchecked(pl.unchecked),
    ]


def _unchecked(features) -> str:
    return f"; not among those runs: {', '.join(features)} (the error may be larger)" if features else ""


def _range(lo_hi, fmt) -> str:
    return f"({fmt(lo_hi[0]).strip()} … {fmt(lo_hi[1]).strip()})"


def format_plan(pl: Plan) -> str:
    """The readable report of one plan; every figure is labelled predicted."""
    t, mem = pl.time, pl.memory
    lines = _header(pl) + [f"layout   {pl.layout.describe()}", "",
                           "predicted memory per GPU (fullest pipeline stage)"]
    lines += [f"  {c:<12}{_bytes(mem[c])}" for c in CATEGORIES]
    verdict = "FITS" if pl.fits else "DOES NOT FIT"
    lines.append(f"  {'total':<12}{_bytes(mem['total'])}   of {_bytes(pl.memory_limit).strip()} usable "
                 f"({pl.profile.usable_memory:.0%} of {_bytes(pl.profile.memory_bytes).strip()})  -> {verdict}")
    if not pl.fits:
        lines.append(f"  hint: {_advice(pl)}")
    lines += ["", "predicted step time"]
    rows = [("GEMMs", t["compute_s"]), ("memory-bound", t["memory_s"]), ("tp comm", t["comm_tp_s"]),
            ("cp comm", t["comm_cp_s"]), ("pp comm", t["comm_pp_s"]), ("dp comm", t["comm_dp_s"]),
            ("bubble", t["bubble_s"]), ("optimizer", t["optimizer_s"]),
            ("interference", t.get("interference_s", 0.0)), ("total", t["total_s"])]
    if pl.layout.cp == 1:
        rows = [r for r in rows if r[0] != "cp comm"]
    lines += [f"  {name:<12}{_sec(v)}" for name, v in rows]
    r = pl.ranges
    lines[-1] += f"   {_range(r['step_time_s'], _sec)} from the error bar"
    lines += ["", f"predicted MFU             {t['mfu']:6.1%}   {_range(r['mfu'], lambda x: f'{x:.1%}')}"
                  f"   (hardware FLOPs utilisation {t['hfu']:.1%})",
              f"predicted bubble          {t['bubble_fraction']:6.1%}",
              f"predicted throughput      {t['tokens_per_s']:,.0f} tokens/s   "
              f"{_range(r['tokens_per_s'], lambda x: f'{x:,.0f}')}",
              "predicted sent per GPU    " + ", ".join(f"{k} {_bytes(pl.comm_bytes[k]).strip()}" for k in ("dp", "tp", "pp", "cp")
                                          if k != "cp" or pl.layout.cp > 1)
              + " per step",
              "(analytical cost model: predictions, not measurements)"]
    return "\n".join(lines)


def _advice(pl: Plan) -> str:
    mem, lay = pl.memory, pl.layout
    if max(CATEGORIES, key=lambda c: mem[c]) == "activations":
        # under flash attention selective recomputation frees only the log-sum-exp: suggest full
        policies = ("full",) if lay.flash_attention else ("selective", "full")
        steps = [f"--ckpt {c}" for c in policies if c != lay.checkpointing][:1]
        steps += ["a smaller --micro-batch" if lay.micro_batch > 1 else "more --tp or --pp"]
        if lay.tp > 1 and not lay.sp:
            steps.append("--sp")
        return "activations dominate: try " + ", ".join(steps)
    if lay.zero < 3 and lay.dp > 1:
        return f"model states dominate: try --zero {lay.zero + 1}, or more --tp or --pp"
    return "model states dominate: try more --tp or --pp (or more GPUs)"


def format_search(plans: list[Plan], *, gpus: int, global_batch: int) -> str:
    """A ranked table of plans (fitting ones first, fastest first)."""
    if not plans:
        return f"no valid layout for {gpus} GPUs and global batch {global_batch}"
    lines = _header(plans[0]) + [
        f"search   global batch {global_batch}; ranked by predicted step time", "",
        f"{'#':>3} {'dp':>4} {'tp':>3} {'pp':>3} {'zero':>4} {'schedule':<14} {'mb×m':>9} {'ckpt':<9} "
        f"{'pred. mem/GPU':>13} {'pred. step':>11} {'step range':>19} {'pred. MFU':>9} {'MFU range':>13} "
        f"{'bubble':>6}  fits  stages",
    ]
    for i, pl in enumerate(plans, 1):
        lay, r = pl.layout, pl.ranges
        sched = (lay.schedule + (f" v={lay.v}" if lay.v > 1 else "")) if lay.pp > 1 else "-"
        stages = "/".join(map(str, lay.stage_layers)) if lay.stage_layers else ("even" if lay.pp > 1 else "-")
        if len(stages) > 24:
            stages = stages[:21] + "..."
        lines.append(
            f"{i:>3} {lay.dp:>4} {lay.tp:>3} {lay.pp:>3} {lay.zero:>4} {sched:<14} "
            f"{f'{lay.micro_batch}×{lay.num_micro_batches}':>9} {lay.checkpointing:<9} "
            f"{_bytes(pl.memory['total']):>13} {_sec(pl.step_time_s).strip():>11} "
            f"{_range(r['step_time_s'], _sec):>19} {pl.mfu:>9.1%} {_range(r['mfu'], lambda x: f'{x:.1%}'):>13} "
            f"{pl.bubble_fraction:>6.1%}  {'yes' if pl.fits else 'NO ':<4}  {stages}"
        )
    if not plans[0].fits:
        lines.append(f"no layout fits in {_bytes(plans[0].memory_limit).strip()} per GPU; shown: the ones needing "
                     f"the least memory. Try more GPUs or a smaller model.")
    lines.append(f"ranges: the planner's {plans[0].error_bar.describe()}"
                 + _unchecked(sorted(set().union(*(pl.unchecked for pl in plans)))))
    lines.append("(analytical cost model: predictions, not measurements)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpukit plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
