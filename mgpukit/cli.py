"""`mgpukit` command line: info | list | run | tour | bench | plan | calibrate | export.

Each area adds its own subcommand with a `register(subparsers)` function, so this file only
wires them together. A mistake in what was asked — a bad argument, a layout that cannot run, an
unknown profile — is one line on stderr, `mgpukit: error: <cause and fix>`, exit code 2; a rank
that failed is its message (the rank's traceback) without ours, exit code 1. `--debug`, before
or after the subcommand, shows the full traceback instead."""
from __future__ import annotations

import argparse
import json
import sys
import warnings

from mgpukit.argtypes import nonnegative_int, positive_int, seconds
from mgpukit.commands import plan as plan_cli
from mgpukit.environment import check_environment
from mgpukit.files import OutputError, check_output, describe_os_error
from mgpukit.run_args import (add_config_arguments, add_layout_arguments, config_from_args, layout_from_args,
                              options_from_args)
from mgpukit.signals import Terminated, ignore_file_size_limit, raise_on_termination, restore

# Every other mgpukit import in this file is made inside the function that needs it, on
# purpose: `mgpukit plan` builds only its own subcommand and must never import torch
# (tests/test_training_cost.py), and `mgpukit info` / `--help` should not pay for importing
# every strategy. Each such import is marked "# lazy: start-up".


def _info(args):
    from mgpukit.runtime.hardware import (cuda_device_count, default_mode,  # lazy: start-up
                                          default_workers, env_info, placement_lines)
    from mgpukit.threads import policy as thread_policy  # lazy: start-up

    env = env_info()
    print(f"mgpukit — torch {env['torch']}, accelerate {env['accelerate']}, python {env['python']}")
    print(f"platform: {env['platform']}")
    print(f"cores: {env['cores']}   memory: {env['memory_bytes'] / 2**30:.1f} GiB")
    if env["gpus"]:
        for g in env["gpus"]:
            mem = f"{g['memory_bytes'] / 2**30:.0f} GiB" if g.get("memory_bytes") else "?"
            print(f"gpu {g['index']}: {g['name']} ({mem})")
    else:
        print("gpus: none — workers run on CPU with gloo (use --emulate PROFILE for GPU timings)")
    print(f"default mode: {default_mode()}   default workers: {default_workers()}"
          f"   (GPUs visible: {cuda_device_count()})")
    print("what runs where (mode auto):")
    for line in placement_lines():
        print(f"  {line}")
    pol = thread_policy()
    print(f"threads: a CPU worker gets cores // workers intra-op threads; OpenMP waits "
          f"{pol['omp_waits']} ({pol['known_from']})" + (f" — {pol['note']}" if pol.get("note") else ""))
    if args.json:
        print(json.dumps(env, indent=1))


def _list(args):
    from mgpukit.strategies import available  # lazy: start-up

    rows = sorted(available(), key=lambda s: (s.family, s.name))
    width = max(len(s.name) for s in rows)
    for s in rows:
        print(f"{s.name:<{width}}  {s.family:<16} {s.description}")


_DEBUG_HELP = "on an error, show the full traceback instead of one line"


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error of the CLI."""

    def error(self, message):
        self.exit(2, f"mgpukit: error: {message} (see `{self.prog} --help`)\n")


def add_run_arguments(p):
    p.add_argument("--workers", type=positive_int, default=None, help="number of ranks (default: the strategy's)")
    p.add_argument("--mode", default="auto", choices=["auto", "cpu", "gpu", "emulated"])
    p.add_argument("--emulate", metavar="PROFILE", default=None,
                   help="emulated mode with this hardware profile (e.g. h100-nvlink)")
    add_config_arguments(p)  # model, batch, optimizer, -o knobs; then the layout (run_args.py)
    add_layout_arguments(p)
    p.add_argument("--timeout", type=seconds, default=600.0,
                   help="seconds the whole run may take (default 600)")
    p.add_argument("--collective-timeout", type=seconds, default=None, metavar="SECONDS",
                   help="seconds one collective may wait for its peers before its rank fails "
                        "(default: 60 for the tiny models, 180 for gpt-small, 300 on GPUs)")
    p.add_argument("--debug-collectives", action="store_true",
                   help="TORCH_DISTRIBUTED_DEBUG=DETAIL in the workers: ranks that call different "
                        "collectives fail at once, naming both (slower; for debugging)")
    ck = p.add_argument_group("checkpoint and restart (torch.distributed.checkpoint)")
    ck.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                    help="save checkpoints here (= -o checkpoint_dir=DIR); any layout can load them")
    ck.add_argument("--checkpoint-every", type=positive_int, default=None, metavar="K",
                    help="save every K steps (default: after the last step only)")
    ck.add_argument("--keep-checkpoints", type=positive_int, default=None, metavar="K",
                    help="keep the newest K checkpoints in --checkpoint-dir, delete older ones (default 3)")
    ck.add_argument("--resume", action="store_true", default=None,
                    help="start from the latest checkpoint in --checkpoint-dir")
    ck.add_argument("--max-restarts", type=nonnegative_int, default=0, metavar="N",
                    help="when a rank fails, relaunch the run up to N times from the last checkpoint "
                         "(needs --checkpoint-dir; the record lists the restarts)")


def checkpoint_options(args, options: dict) -> dict:
    """`options` with the checkpoint flags' knobs; a flag and an `-o` that disagree are refused."""
    for flag, key in (("checkpoint_dir", "checkpoint_dir"), ("checkpoint_every", "checkpoint_every"),
                      ("resume", "resume"), ("keep_checkpoints", "keep_checkpoints")):
        value = getattr(args, flag, None)
        if value is None:
            continue
        if value == "":
            raise ValueError(f"--{flag.replace('_', '-')} is empty; give a folder.")
        if key in options and options[key] != value:
            raise ValueError(f"--{flag.replace('_', '-')} {value} and -o {key}={options[key]} disagree; "
                             f"give one of them.")
        options[key] = value
    for flag, key in (("--checkpoint-every", "checkpoint_every"), ("--keep-checkpoints", "keep_checkpoints")):
        if options.get(key) and not options.get("checkpoint_dir"):  # used to be ignored
            raise ValueError(f"{flag} {options[key]} needs --checkpoint-dir DIR: where to save them.")
    restarts = getattr(args, "max_restarts", 0)
    if restarts and not options.get("checkpoint_dir"):
        raise ValueError(f"--max-restarts {restarts} needs --checkpoint-dir DIR: a restarted run "
                         f"goes on from the last checkpoint (without one it would start over).")
    return options


def _run(args):
    if args.emulate is not None and not args.emulate.strip():  # '' used to run unemulated
        raise ValueError("--emulate needs a hardware profile name, e.g. --emulate h100-nvlink "
                         "(`mgpukit plan --help` lists them).")
    if args.emulate and args.mode not in ("auto", "emulated"):  # it used to run emulated, silently
        raise ValueError(f"--emulate {args.emulate} runs on the virtual clock (emulated mode), not "
                         f"--mode {args.mode}; drop one of them.")
    mode = "emulated" if args.emulate else args.mode
    if getattr(args, "shape", False) and mode != "emulated":
        raise ValueError("--shape runs on the virtual clock only: add --emulate PROFILE (e.g. h100-nvlink).")
    try:
        record = _run_record(args, mode)
    except OutputError as e:  # the run finished; a file failed: show the run, then the error
        if getattr(e, "record", None) is not None:
            print_summary([e.record])
        raise
    _report_run(args, record)
    parity = record.get("parity")
    return 0 if not isinstance(parity, dict) or parity["ok"] else 1  # str: "n/a (shape mode)"


def _run_record(args, mode):
    from mgpukit.experiment import run  # lazy: start-up

    return run(args.strategy, workers=args.workers, mode=mode, profile=args.emulate,
               shape=bool(getattr(args, "shape", False)),
               config=config_from_args(args, checkpoint_options(args, options_from_args(args))),
               layout=layout_from_args(args),
               parity=not args.no_parity, timeout_s=args.timeout, json_path=args.json, trace_path=args.trace,
               torch_profile_dir=args.profile_torch, weights_path=args.save_weights, echo=True,
               collective_timeout_s=args.collective_timeout, debug_collectives=args.debug_collectives,
               max_restarts=args.max_restarts, **({"model": args.model} if args.model else {}))  # named: not swapped


def _report_run(args, record):
    if record.get("model_note"):
        print(record["model_note"])
    print_summary([record])
    for r in record.get("restarts") or []:
        print(f"restarted after rank {r['rank']} failed: {r['error']}")
    if record.get("resumed_from_step"):
        print(f"resumed from the checkpoint of step {record['resumed_from_step']}: step times "
              f"cover steps {record['resumed_from_step']}..{len(record['losses']) - 1}")
    print_breakdown(record)
    if args.json:
        print(f"record written to {args.json}")
    if args.trace:
        print(f"Chrome/Perfetto trace written to {args.trace} (open it in ui.perfetto.dev)")
    if args.profile_torch:
        print(f"torch.profiler traces written under {args.profile_torch}/")


def print_breakdown(record):
    """Emulated runs: where the step went; pipelines: why they idle."""
    from mgpukit.measure.breakdown import describe_time_split, time_split  # lazy: start-up
    from mgpukit.measure.idle import describe_idle_split  # lazy: start-up

    split = time_split(record)
    if split is not None:
        print(f"where the time went (rank 0, emulated): {describe_time_split(split)}")
    if record.get("idle_split"):
        print(f"why the pipeline idles: {describe_idle_split(record['idle_split'])} "
              f"(theory {record['theory'].get('bubble_fraction', float('nan')):.2f})")


def print_summary(records):
    from mgpukit.plots.summary import format_summary  # lazy: start-up

    print(format_summary(records))


def _bench(args):
    from mgpukit.bench import BENCHES, load_all  # lazy: start-up

    load_all()
    names = sorted(BENCHES) if args.name == "all" else [args.name]
    for name in names:
        if name not in BENCHES:
            raise ValueError(f"unknown benchmark {name!r}; choose from: all, {', '.join(sorted(BENCHES))}")
    check_bench_args(args, names)
    results = {}
    for name in names:
        print(f"== bench {name} ==")
        results[name] = BENCHES[name][0](args)
    if args.json:
        from mgpukit.measure.record import save_record  # lazy: start-up

        save_record(results, args.json)
    return 0


def check_bench_args(args, names) -> None:
    """What `bench` is given, checked before the first benchmark runs: `--profile` names a
    profile and is for `emulation --real`; `--real` needs a GPU (it was refused only after 18 s
    of other benchmarks)."""
    from mgpukit.costmodel.hardware import load_profile  # lazy: start-up
    from mgpukit.runtime.hardware import cuda_device_count  # lazy: start-up

    if args.real and "emulation" not in names:
        raise ValueError(f"--real is for `bench emulation` (it runs models on this GPU); "
                         f"`bench {args.name}` does not take it.")
    if args.profile is not None:
        if not args.real:
            raise ValueError(f"--profile {args.profile} is the profile `bench emulation --real` "
                             f"emulates with; without --real nothing reads it.")
        load_profile(args.profile)  # an unknown name fails now, listing the known ones
    if args.real and cuda_device_count() < 1:
        raise ValueError("--real runs models on this machine's GPU, and none is visible here; "
                         "drop --real (the emulated benchmarks need no GPU).")


def build_parser(*, only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; ``only="plan"`` builds just ``plan``, which is pure arithmetic: it then
    never imports torch (4 s of the 5 s `mgpukit plan --search` used to take)."""
    parser = _Parser(prog="mgpukit", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)  # subcommands are _Parsers too
    if only == "plan":
        plan_cli.register(sub)
        sub.choices["plan"].add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
        return parser
    from mgpukit import calibrate, export, tour  # lazy: start-up

    p = sub.add_parser("info", help="devices, versions, default mode and worker count")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)

    p = sub.add_parser("list", help="registered strategies")
    p.set_defaults(func=_list)

    p = sub.add_parser("run", help="run one strategy, check parity, write its record")
    p.add_argument("strategy")
    add_run_arguments(p)
    p.add_argument("--shape", action="store_true",
                   help="shape mode (with --emulate): the real program on fake tensors, at real "
                        "scale (--model gpt2-350m, llama-7b …); times and memory, no losses")
    p.add_argument("--json", metavar="FILE", help="write the result record")
    p.add_argument("--trace", metavar="FILE", help="write the timeline as a Chrome/Perfetto trace")
    p.add_argument("--profile-torch", metavar="DIR", help="capture a torch.profiler trace per rank")
    p.add_argument("--save-weights", metavar="FILE", help="save the trained weights (safetensors)")
    p.add_argument("--no-parity", action="store_true", help="skip the single-process reference")
    p.set_defaults(func=_run)

    p = sub.add_parser("bench", help="benchmarks (ratios in one run): launch, emulation, dp, comm, pipeline, memory, overhead, gpu, all")
    p.add_argument("name", nargs="?", default="all")
    p.add_argument("--workers", type=positive_int, default=None)
    p.add_argument("--repeats", type=positive_int, default=None)
    p.add_argument("--quick", action="store_true", help="smaller settings (used by the tests)")
    p.add_argument("--real", action="store_true",
                   help="emulation: also run gpt-tiny, gpt-small, GPT-2 124M for real on this GPU beside the emulated steps")
    p.add_argument("--profile", metavar="PROFILE", default=None,
                   help="emulation --real: the profile to emulate with (default: this-gpu if calibrated, else h100-nvlink)")
    p.add_argument("--model", default=None, help="overhead, gpu: the model (default gpt-tiny)")
    p.add_argument("--steps", type=positive_int, default=None, help="overhead: steps per block")
    p.add_argument("--mode", default=None, choices=["gpu", "cpu"],
                   help="gpu: on the GPUs present (default when there are); cpu: rehearse on CPU workers")
    p.add_argument("--busy", action="store_true",
                   help="overhead: keep one core busy with another process meanwhile, and time "
                        "the plain loop on 1 thread (issue 29's check)")
    p.add_argument("--json", metavar="FILE")
    p.set_defaults(func=_bench)

    for module in (tour, plan_cli, calibrate, export):
        module.register(sub)
    for p in sub.choices.values():  # --debug after the subcommand too; SUPPRESS keeps the global one
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    return parser


def _error_message(e: BaseException) -> tuple[int, str] | None:
    """(exit code, message) for an error the user can act on; None for a bug (traceback)."""
    from mgpukit.runtime.launcher import LaunchError, LaunchTimeout, WorkerError  # lazy: start-up

    if isinstance(e, WorkerError) and e.one_line:  # a rank stopped on purpose, saying why
        return e.exit_code, e.one_line
    if isinstance(e, (WorkerError, LaunchTimeout)):  # the run failed: the rank's traceback is the news
        return 1, str(e)
    if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):  # a write failed
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        return 2, " ".join(f"{where}{describe_os_error(e) if e.errno else e}".split())
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str):
        return 2, e.args[0]  # str(KeyError) would wrap the message in quotes
    if isinstance(e, (ValueError, KeyError, LaunchError, FileNotFoundError)):  # LayoutError,
        return 2, " ".join(str(e).split())  # ProfileNotFoundError, TOMLDecodeError are ValueErrors
    return None


def main(argv=None) -> int:
    warnings.simplefilter("default")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command != "plan":  # before the first torch import: torch.distributed rejects a bad
        try:  # TORCH_DISTRIBUTED_DEBUG when it is imported (`mgpukit.environment`)
            check_environment(warn=False)  # the launch warns about gloo off loopback
        except ValueError as e:
            if "--debug" in argv:
                raise
            print(f"mgpukit: error: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
    args = build_parser(only="plan" if command == "plan" else None).parse_args(argv)
    handlers = raise_on_termination()  # SIGTERM / SIGHUP end the run as Ctrl-C does
    ignore_file_size_limit()  # `ulimit -f`: a failed write, not a process killed mid-file
    try:
        if isinstance(getattr(args, "json", None), str):  # run, bench, plan: checked before the work
            check_output(args.json, what="--json file")
        return int(args.func(args) or 0)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP: the launch already ended its workers
        notes = " ".join(getattr(e, "__notes__", ()))
        if isinstance(e, Terminated):
            print(f"mgpukit: terminated by {e.signame}; every worker was ended. {notes}".strip(),
                  file=sys.stderr)
            return 128 + e.signum  # what a shell reports for a command a signal ended
        print(f"mgpukit: interrupted. {notes}".strip(), file=sys.stderr)
        return 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C
    except Exception as e:
        report = None if args.debug else _error_message(e)
        if report is None:
            raise
        code, message = report
        print(f"mgpukit: error: {message}", file=sys.stderr)
        return code
    finally:
        restore(handlers)


if __name__ == "__main__":
    sys.exit(main())
