"""pp-1f1b: 1F1B (PipeDream-Flush): one forward, one backward; <= p in flight.

Exported by `mgpukit export pp-1f1b` — the same strategy code the notebooks run.

    accelerate launch --multi_gpu --num_processes 2 scripts/pp-1f1b.py --steps 20
    torchrun --nproc_per_node 2 scripts/pp-1f1b.py --steps 20

On GPUs the workers use NCCL; without GPUs they form one gloo group of CPU workers. Rank 0
prints a summary, checks parity against a single process, and writes the result record (--json).
"""
import argparse

from mgpukit.config import RunConfig
from mgpukit.launched import training_function

STRATEGY = "pp-1f1b"


def get_config(args) -> RunConfig:
    return RunConfig(model=args.model, steps=args.steps, global_batch=args.global_batch,
                     micro_batches=args.micro_batches, lr=args.lr, optimizer=args.optimizer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    parser.add_argument("--json", default=None, help="write the result record here (rank 0)")
    parser.add_argument("--no-parity", action="store_true")
    args = parser.parse_args()
    record = training_function(STRATEGY, get_config(args), json_path=args.json,
                               parity=not args.no_parity)
    if record is not None:  # rank 0
        from mgpukit.cli import print_summary

        print_summary([record])


if __name__ == "__main__":
    main()
