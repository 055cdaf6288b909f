"""`mgpukit export NAME`: write the training script for `accelerate launch` / `torchrun`.

One script for every strategy, `scripts/train.py --strategy NAME`, rather than one per
strategy: since every strategy is an applier run by the one trainer, twenty copies would
differ in a single string. The script has the Accelerate examples' skeleton — a docstring with
the exact launch command, `get_config(args)`, `training_function(...)`, `main()` with argparse —
and its options are typed: the layout (`--dp`, `--tp`, `--sp`, `--pp`, `--schedule`, `--v`) and each strategy's
knobs (`-o KEY=VALUE`, checked against the strategy's declared types, unknown keys refused).
`mgpukit export NAME --out FILE` writes the same script with NAME as its default strategy. A
test checks `scripts/train.py` is up to date and runs every strategy through it under
`torchrun` and `accelerate launch`, judged exactly as `mgpukit run` judges them.
"""
from __future__ import annotations

from pathlib import Path

from mgpukit.files import check_output, write_text
from mgpukit.strategies import available, get

TEMPLATE = '''"""Train any mgpukit strategy on the processes `accelerate launch` or `torchrun` start.

Exported by `mgpukit export {name}` — the same appliers and trainer the notebooks run.

    accelerate launch --multi_gpu --num_processes 2 scripts/train.py --strategy {name} --steps 20
    torchrun --nproc_per_node 2 scripts/train.py --strategy {name} --steps 20
    torchrun --nproc_per_node 4 scripts/train.py --strategy pp-1f1b --dp 2 --pp 2
    torchrun --nproc_per_node 2 scripts/train.py --strategy all --steps 3     # every strategy
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        scripts/train.py --strategy {name}                                  # on each of 2 nodes

On GPUs the workers use NCCL; without GPUs they form one gloo group of CPU workers. What each
process does (`mgpukit.launched.training_function`):

    mesh     = ParallelDims(dp, tp, pp) -> DeviceMesh                 (one per launch)
    parts    = parallelize(build_model(cfg), cfg, ctx, rec, strategy)  (appliers, in order)
    weights  = train(ctx, rec, cfg, parts, optimizer)                  (the one trainer)
    record   = finish(...)  on rank 0: the result record and its parity against one process
"""
import argparse
import json
import sys

from mgpukit.config import RunConfig
from mgpukit.launched import teardown, training_function

STRATEGY = "{name}"


def get_config(args) -> RunConfig:
    return RunConfig(model=args.model, steps=args.steps, global_batch=args.global_batch,
                     micro_batches=args.micro_batches, lr=args.lr, optimizer=args.optimizer,
                     options=dict(parse_option(o) for o in args.option))


def parse_option(text: str):
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"train.py: error: -o {{text!r}}: write KEY=VALUE, e.g. -o bucket_mb=1")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def print_skip(name: str, reason: str) -> None:
    """`--strategy all`: one line for each strategy this launch cannot run (rank 0)."""
    print(f"skip {{name}}: {{reason}}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default=STRATEGY, help="a strategy from `mgpukit list`, or 'all'")
    parser.add_argument("--model", default="gpt-tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    parser.add_argument("--dp", type=int, default=None, help="data-parallel degree")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel degree")
    parser.add_argument("--sp", action="store_true", default=None, help="sequence parallelism (with --tp)")
    parser.add_argument("--pp", type=int, default=None, help="pipeline-parallel degree")
    parser.add_argument("--schedule", default=None, help="pipeline schedule (with --pp)")
    parser.add_argument("--v", type=int, default=None, help="model chunks per pipeline rank")
    parser.add_argument("--checkpointing", default=None, choices=["none", "full", "selective"],
                        help="activation checkpointing policy")
    parser.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                        help="bf16: autocast, fp32 master weights")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a strategy knob, e.g. -o bucket_mb=1 (checked against its type)")
    parser.add_argument("--json", default=None, help="write the result record here (rank 0)")
    parser.add_argument("--no-parity", action="store_true")
    args = parser.parse_args()
    layout = {{"dp": args.dp, "tp": args.tp, "sp": args.sp, "pp": args.pp, "schedule": args.schedule,
              "v": args.v, "checkpointing": args.checkpointing, "dtype": args.dtype}}
    ok = True
    try:
        for name, record in training_function(args.strategy, get_config(args), layout=layout,
                                              json_path=args.json, parity=not args.no_parity,
                                              on_skip=print_skip):
            if record is not None:  # rank 0
                from mgpukit.cli import print_summary

                print_summary([record])
                ok &= record["parity"] is None or record["parity"]["ok"]
    finally:
        teardown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
'''


def script_for(name: str = "ddp") -> str:
    return TEMPLATE.format(name=get(name).name)


def export(name: str, out: str | Path, *, force: bool = False) -> Path:
    """Write the script for `name` to `out`. An existing file with other content is refused
    unless `force` (it may be the user's edited copy); one with the same content is left as is."""
    text = script_for(name)
    out = Path(out)
    if not force and out.is_file() and out.read_text(errors="replace") == text:
        return out
    check_output(out, what="export file (--out)", overwrite=force)
    return write_text(out, text, what="export file (--out)")


def exportable() -> list[str]:
    """Strategies `--strategy all` runs on several processes (`single`, the one-process
    reference, runs inside every parity check; `--nproc_per_node 1` runs it alone)."""
    return sorted(s.name for s in available() if s.family not in ("test", "reference"))


def _export_command(args):
    out = Path(args.out)
    export(args.strategy, out, force=args.force)
    print(f"wrote {out}")
    return 0


def register(sub):
    p = sub.add_parser("export", help="write the training script for `accelerate launch` / `torchrun`")
    p.add_argument("strategy", nargs="?", default="ddp", help="the script's default strategy")
    p.add_argument("--out", default="scripts/train.py", help="output file")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file that differs")
    p.set_defaults(func=_export_command)
