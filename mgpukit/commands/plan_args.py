"""``mgpukit plan``'s flags turned into what the planner takes: the model (a shipped file, your
own file, or its sizes), the layout, the token budget — each refused in one line when it cannot
be (a size below 1 or beyond any cluster, degrees that do not divide the GPUs, a layout flag
beside ``--search``, which chooses the layout itself). The command is
:mod:`mgpukit.commands.plan`; its tables, :mod:`mgpukit.commands.plan_format`.
"""

from __future__ import annotations

from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import get_shape, shape_from_dict, shape_to_dict
from mgpukit.costmodel.training_cost import check_price, token_budget
from mgpukit.run_args import layout_from_args

SIZE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "gated_mlp", "norm", "positions",
              "tied_embeddings", "bias", "dropout", "experts", "top_k", "expert_ffn", "capacity_factor")

_POSITIVE = ("gpus", "dp", "tp", "pp", "cp", "ep", "v", "micro_batch", "global_batch", "micro_batches", "top",
             "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "experts", "top_k", "expert_ffn")
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


def planned_layout(args) -> Layout:
    """The layout the flags ask for on ``--gpus`` GPUs: the layout flags (`mgpukit.run_args`,
    shared with ``run``) and the batch, resolved by `Layout.on_gpus`."""
    stage_layers = args.stage_layers
    if stage_layers is not None:
        try:
            stage_layers = tuple(int(x) for x in stage_layers.split(","))
        except ValueError:
            raise ValueError(f"--stage-layers {stage_layers!r}: give whole numbers separated by commas, "
                             f"one per stage (e.g. 7,9,9,7)") from None
    return Layout.on_gpus(args.gpus, **layout_from_args(args), global_batch=args.global_batch,
                          micro_batches=args.micro_batches,
                          zero=args.zero, micro_batch=args.micro_batch, stage_layers=stage_layers,
                          tp_overlap=args.tp_overlap, flash_attention=args.flash,
                          attention_kernel=args.attention_kernel)


def check_positive(args) -> None:
    for name in _POSITIVE:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be at least 1")
        if value is not None and value > MAX_COUNT:
            raise ValueError(f"--{name.replace('_', '-')} {value}: more than 10^12 is beyond any "
                             f"cluster; give a realistic number")


# the layout flags --search chooses itself, with the values that mean "not given" (--tp and --pp
# are not among them: with --search they keep only that degree)
_SEARCHED = {"dp": (None,), "cp": (None, 1), "ep": (None, 1), "v": (None,), "micro_batches": (None,),
             "stage_layers": (None,)}


def check_search_args(args) -> None:
    """--search picks the layout; a layout flag beside it was silently ignored: refuse it."""
    given = [f"--{k.replace('_', '-')} {getattr(args, k)}" for k, unset in _SEARCHED.items()
             if getattr(args, k, None) not in unset]
    if given:
        raise ValueError(f"--search chooses the layout itself, so {', '.join(given)} would be ignored; "
                         f"drop {'them' if len(given) > 1 else 'it'}, or drop --search to predict that "
                         f"one layout")


def budget(args) -> "float | None":
    """Tokens of the run when --tokens or --epochs/--dataset-tokens are given (checked), else None."""
    price = check_price(getattr(args, "price_per_gpu_hour", None))
    given = [getattr(args, k, None) for k in ("tokens", "epochs", "dataset_tokens")]
    if all(g is None for g in given):
        if price is not None:
            raise ValueError("--price-per-gpu-hour needs a token budget: add --tokens (e.g. 2T) "
                             "or --epochs with --dataset-tokens")
        return None
    return token_budget(tokens=args.tokens, epochs=args.epochs, dataset_tokens=args.dataset_tokens)
