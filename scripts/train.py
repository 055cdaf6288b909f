"""Train any mgpukit strategy on the processes `accelerate launch` or `torchrun` start.

Exported by `mgpukit export --runner` — the same appliers and trainer the notebooks run. For one
strategy with its training loop in plain sight, see `mgpukit export STRATEGY` (scripts/train_ddp.py).

    accelerate launch --multi_gpu --num_processes 2 scripts/train.py --strategy ddp --steps 20
    torchrun --nproc_per_node 2 scripts/train.py --strategy ddp --steps 20
    torchrun --nproc_per_node 4 scripts/train.py --strategy pp-1f1b --dp 2 --pp 2
    torchrun --nproc_per_node 2 scripts/train.py --strategy all --steps 3     # every strategy
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        scripts/train.py --strategy ddp                                  # on each of 2 nodes

On GPUs the workers use NCCL; without GPUs they form one gloo group of CPU workers. What each
process does (`mgpukit.launched.training_function`):

    mesh     = ParallelDims(dp, tp, pp) -> DeviceMesh                 (one per launch)
    parts    = parallelize(build_model(cfg), cfg, ctx, rec, strategy)  (appliers, in order)
    weights  = train(ctx, rec, cfg, parts, optimizer)                  (the one trainer)
    record   = finish(...)  on rank 0: the result record and its parity against one process
"""
import argparse
import sys

from mgpukit.launched import teardown, training_function
from mgpukit.run_args import add_config_arguments, add_layout_arguments, config_from_args, layout_from_args

STRATEGY = "ddp"


def print_skip(name: str, reason: str) -> None:
    """`--strategy all`: one line for each strategy this launch cannot run (rank 0)."""
    print(f"skip {name}: {reason}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default=STRATEGY, help="a strategy from `mgpukit list`, or 'all'")
    add_config_arguments(parser)  # the same flags as `mgpukit run` (mgpukit/run_args.py)
    add_layout_arguments(parser)
    parser.add_argument("--json", default=None, help="write the result record here (rank 0)")
    parser.add_argument("--no-parity", action="store_true")
    args = parser.parse_args()
    ok = True
    try:
        for name, record in training_function(args.strategy, config_from_args(args), layout=layout_from_args(args),
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
