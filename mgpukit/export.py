"""`mgpukit export NAME`: write a strategy as a standalone script for `accelerate launch`.

The script has the Accelerate examples' skeleton — a docstring with the exact launch command,
`training_function(config, args)`, `main()` with argparse — and calls the same strategy code the
notebooks run. `scripts/` holds one per registered strategy; a test checks they are up to date
and runs one under `torchrun` and `accelerate launch`, so they cannot rot.
"""
from __future__ import annotations

from pathlib import Path

TEMPLATE = '''"""{name}: {description}.

Exported by `mgpukit export {name}` — the same strategy code the notebooks run.

    accelerate launch --multi_gpu --num_processes {workers} scripts/{file} --steps 20
    torchrun --nproc_per_node {workers} scripts/{file} --steps 20

On GPUs the workers use NCCL; without GPUs they form one gloo group of CPU workers. Rank 0
prints a summary, checks parity against a single process, and writes the result record (--json).
"""
import argparse

from mgpukit.config import RunConfig
from mgpukit.launched import training_function

STRATEGY = "{name}"


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
'''


def script_for(name: str) -> str:
    from mgpukit.strategies import get

    s = get(name)
    return TEMPLATE.format(name=s.name, description=s.description, workers=max(2, s.min_workers),
                           file=f"{s.name}.py")


def export(name: str, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(script_for(name))
    return out


def exportable() -> list[str]:
    """Strategies that run under an external launcher (not the emulated-only ones)."""
    from mgpukit.strategies import available

    return sorted(s.name for s in available() if getattr(s, "exportable", True))


def _export_command(args):
    names = exportable() if args.strategy == "all" else [args.strategy]
    for name in names:
        out = Path(args.out) if args.out and len(names) == 1 else Path(args.dir) / f"{name}.py"
        export(name, out)
        print(f"wrote {out}")
    return 0


def register(sub):
    p = sub.add_parser("export", help="write a strategy as a script for `accelerate launch`")
    p.add_argument("strategy", help="a registered strategy, or 'all'")
    p.add_argument("--out", default=None, help="output file (one strategy)")
    p.add_argument("--dir", default="scripts", help="output folder (with 'all')")
    p.set_defaults(func=_export_command)
