"""`mgpukit` command line: info | list | run | tour | bench | plan | calibrate | export.

Each area adds its own subcommand with a `register(subparsers)` function, so this file only
wires them together."""
from __future__ import annotations

import argparse
import json
import sys
import warnings


def _info(args):
    from mgpukit.runtime.hardware import cuda_device_count, default_mode, default_workers, env_info

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
    if args.json:
        print(json.dumps(env, indent=1))


def _list(args):
    from mgpukit.strategies import available

    rows = sorted(available(), key=lambda s: (s.family, s.name))
    width = max(len(s.name) for s in rows)
    for s in rows:
        print(f"{s.name:<{width}}  {s.family:<16} {s.description}")


def _parse_options(pairs):
    options = {}
    for pair in pairs or []:
        key, _, value = pair.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def add_run_arguments(p):
    p.add_argument("--workers", type=int, default=None, help="number of ranks (default: the strategy's)")
    p.add_argument("--mode", default="auto", choices=["auto", "cpu", "gpu", "emulated"])
    p.add_argument("--emulate", metavar="PROFILE", default=None,
                   help="emulated mode with this hardware profile (e.g. h100-nvlink)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--model", default=None, help="gpt-tiny | gpt-small | mlp-tiny | mlp-wide")
    p.add_argument("--global-batch", type=int, default=None)
    p.add_argument("--micro-batches", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--optimizer", default=None, choices=["sgd", "adamw"])
    p.add_argument("--option", "-o", action="append", metavar="KEY=VALUE",
                   help="strategy knob, e.g. -o bucket_mb=1 -o schedule=1f1b")
    p.add_argument("--timeout", type=float, default=600.0)


def config_from_args(args):
    from mgpukit.config import RunConfig

    fields = {k: v for k, v in {"steps": args.steps, "model": args.model,
                                "global_batch": args.global_batch, "lr": args.lr,
                                "micro_batches": args.micro_batches,
                                "optimizer": args.optimizer}.items() if v is not None}
    return RunConfig(**fields, options=_parse_options(args.option))


def _run(args):
    from mgpukit.experiment import run

    mode = "emulated" if args.emulate else args.mode
    record = run(args.strategy, workers=args.workers, mode=mode, profile=args.emulate,
                 config=config_from_args(args), parity=not args.no_parity,
                 timeout_s=args.timeout, json_path=args.json, trace_path=args.trace,
                 torch_profile_dir=args.profile_torch, weights_path=args.save_weights, echo=True)
    print_summary([record])
    if args.json:
        print(f"record written to {args.json}")
    if args.trace:
        print(f"Chrome/Perfetto trace written to {args.trace} (open it in ui.perfetto.dev)")
    if args.profile_torch:
        print(f"torch.profiler traces written under {args.profile_torch}/")
    parity = record.get("parity")
    return 0 if parity is None or parity["ok"] else 1


def print_summary(records):
    from mgpukit.plots import table_summary

    rows = table_summary(records)
    ws = max([len("strategy")] + [len(r["strategy"]) for r in rows])  # columns fit their longest entry
    wl = max([len("source")] + [len(r["source_label"]) for r in rows])
    header = f"{'strategy':<{ws}} {'source':<{wl}} {'ranks':>5} {'final loss':>10} {'step ms':>9} " \
             f"{'tokens/s':>10} {'peak MiB':>9} {'MB sent/step':>12} {'parity':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        def fmt(v, spec):
            return format(v, spec) if v is not None else "-"
        parity = {True: "ok", False: "FAIL", None: "-"}[r["parity_ok"]]
        step_ms = r["median_step_time_s"] * 1e3 if r["median_step_time_s"] is not None else None
        peak = r["peak_memory_bytes"] / 2**20 if r["peak_memory_bytes"] is not None else None
        sent = r["bytes_sent_per_step"] / 1e6 if r["bytes_sent_per_step"] is not None else None
        print(f"{r['strategy']:<{ws}} {r['source_label']:<{wl}} {r['world_size']:>5} "
              f"{fmt(r['final_loss'], '.4f'):>10} {fmt(step_ms, '.3f'):>9} "
              f"{fmt(r['tokens_per_s'], '.0f'):>10} {fmt(peak, '.2f'):>9} {fmt(sent, '.3f'):>12} {parity:>7}")


def _bench(args):
    from mgpukit.bench import BENCHES, load_all

    load_all()
    names = sorted(BENCHES) if args.name == "all" else [args.name]
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; choose from: all, {', '.join(sorted(BENCHES))}",
                  file=sys.stderr)
            return 2
    results = {}
    for name in names:
        print(f"== bench {name} ==")
        results[name] = BENCHES[name][0](args)
    if args.json:
        from mgpukit.measure.record import save_record

        save_record(results, args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mgpukit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="devices, versions, default mode and worker count")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)

    p = sub.add_parser("list", help="registered strategies")
    p.set_defaults(func=_list)

    p = sub.add_parser("run", help="run one strategy, check parity, write its record")
    p.add_argument("strategy")
    add_run_arguments(p)
    p.add_argument("--json", metavar="FILE", help="write the result record")
    p.add_argument("--trace", metavar="FILE", help="write the timeline as a Chrome/Perfetto trace")
    p.add_argument("--profile-torch", metavar="DIR", help="capture a torch.profiler trace per rank")
    p.add_argument("--save-weights", metavar="FILE", help="save the trained weights (safetensors)")
    p.add_argument("--no-parity", action="store_true", help="skip the single-process reference")
    p.set_defaults(func=_run)

    p = sub.add_parser("bench", help="benchmarks (ratios in one run): launch, emulation, dp, comm, pipeline, all")
    p.add_argument("name", nargs="?", default="all")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="smaller settings (used by the tests)")
    p.add_argument("--json", metavar="FILE")
    p.set_defaults(func=_bench)

    for module in ("mgpukit.tour", "mgpukit.costmodel.plan_cli", "mgpukit.calibrate",
                   "mgpukit.export"):
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue
        mod.register(sub)
    return parser


def main(argv=None) -> int:
    warnings.simplefilter("default")
    args = build_parser().parse_args(argv)
    code = args.func(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
