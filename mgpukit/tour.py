"""`mgpukit tour`: every registered strategy on the devices present, then the same ideas
emulated on GPU hardware and predicted by the cost model — one HTML report.

Three kinds of figures, always labelled:
- **measured**: each strategy run for real on this machine's workers (GPUs with NCCL when there
  are enough, else CPU workers with gloo), with parity against the single-process reference;
- **emulated**: DDP strong scaling of GPT-2 124M on a GPU profile's virtual clock, in shape
  mode (`mgpukit.measure.shape`: the real DDP code on fake tensors, host launches charged) —
  a model sized for the GPU, where the tiny GPT would only measure kernel launches;
- **predicted**: the cost model's answer for a real cluster (70B on 64 H100s).
"""
from __future__ import annotations

import time
import traceback
import warnings
from pathlib import Path

from mgpukit.argtypes import positive_int
from mgpukit.config import RunConfig
from mgpukit.costmodel import planner
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.experiment import run
from mgpukit.files import check_output, write_all, write_text
from mgpukit.plots import plot_memory, plot_speedup, table_summary
from mgpukit.plots.summary import format_summary
from mgpukit.report import write_records, write_report
from mgpukit.runtime.hardware import cpu_name, default_mode, default_workers, env_info
from mgpukit.runtime.launcher import OversubscribedWarning
from mgpukit.strategies import available

# the emulated rows: a real-scale model in shape mode (never allocated), a global batch of 8
# sequences of 1024 tokens split over the emulated GPUs, 2 steps
EMULATED = {"model": "gpt2-124m", "global_batch": 8, "steps": 2}

FAMILY_ORDER = ["reference", "data-parallel", "communication", "compression", "pipeline",
                "tensor-parallel", "sharding", "memory", "hybrid"]


def tour_plan(workers: int) -> list[tuple[str, int]]:
    """(strategy, workers) for every registered strategy that fits on `workers` ranks."""
    plan = []
    for s in sorted(available(), key=lambda s: (_family_rank(s.family), s.name)):
        n = 1 if s.reference is None and s.name == "single" else max(s.min_workers, min(workers, s.default_workers))
        if n <= max(workers, s.min_workers):
            plan.append((s.name, n))
    return plan


def _family_rank(family: str) -> int:
    return FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)


def run_tour(*, workers: int | None = None, steps: int = 10, out: str | Path = "report",
             emulate: str = "h100-nvlink", emulated_workers=(1, 2, 4, 8), only=None,
             progress: bool = True) -> dict:
    """Run the tour; return {"records", "failures", "report", "extra"}.

    Everything it is given is checked before the first run (the output folder, the emulation
    profile, the names in `only`). A strategy that fails is reported and the tour goes on;
    whatever finished is written even when the figures at the end fail, and on Ctrl-C the
    finished runs are written before the `KeyboardInterrupt` goes on up."""
    # lazy: start-up (tqdm.auto loads ipywidgets, ~0.2 s)
    from tqdm.auto import tqdm

    workers = check_tour_args(workers=workers, steps=steps, out=out, emulate=emulate, only=only)
    mode = default_mode() if workers > 1 else "cpu"
    cfg = RunConfig(steps=steps)
    plan = [(n, w) for n, w in tour_plan(workers) if not only or n in only]
    records, failures = [], []
    jobs = [("measured", name, n) for name, n in plan]
    jobs += [("emulated", "ddp", n) for n in emulated_workers]
    bar = tqdm(jobs, desc="mgpukit tour", disable=not progress, unit="run")
    try:
        _run_jobs(bar, records, failures, mode=mode, cfg=cfg, emulate=emulate)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM / SIGHUP from the CLI (mgpukit.signals)
        try:
            report = _write_tour(records, failures, out, emulate,
                                 interrupted=getattr(stop, "signame", "Ctrl-C"))
            stop.add_note(f"The tour's {len(records)} finished run(s) are in {report}.")
        except Exception as e:  # never let a failed write hide the interrupt
            warnings.warn(f"the interrupted tour's report could not be written: {e}")
        raise
    return {"records": records, "failures": failures,
            "report": _write_tour(records, failures, out, emulate)}


def check_tour_args(*, workers, steps, out, emulate, only) -> int:
    """The tour's arguments, checked before any run; returns the number of workers."""
    workers = default_workers() if workers is None else workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r}: give a positive number of workers.")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r}: give a positive number of steps.")
    check_output(out, what="tour report folder (--out)", directory=True)
    load_profile(emulate)  # an unknown profile fails now, naming the known ones
    if only is not None:
        names = {s.name for s in available()}
        unknown = [n for n in only if n not in names]
        if unknown or not only:
            raise ValueError(f"--only {' '.join(unknown) or '(nothing)'}: not a registered strategy; "
                             f"choose from {', '.join(sorted(names))}.")
        twice = sorted({n for n in only if list(only).count(n) > 1})
        if twice:
            raise ValueError(f"--only names {', '.join(twice)} more than once; name each strategy once.")
        needs = {s.name: s.min_workers for s in available()}
        short = [n for n in only if needs[n] > workers]
        if short:  # tour_plan would run them on more workers than asked, silently
            raise ValueError(f"--only {short[0]} needs at least {needs[short[0]]} workers and the tour "
                             f"runs {workers}; give --workers {needs[short[0]]} or more, or drop it.")
    return workers


def _run_jobs(bar, records, failures, *, mode, cfg, emulate) -> None:
    for kind, name, n in bar:
        bar.set_postfix_str(f"{name} ×{n} ({kind})")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OversubscribedWarning)
                if kind == "measured":
                    rec = run(name, workers=n, mode=mode if n > 1 else "cpu", config=cfg,
                              parity=name != "single")
                else:
                    rec = run(name, workers=n, mode="emulated", profile=emulate, shape=True,
                              config=cfg.replace(**EMULATED), parity=False)
            records.append(rec)
        except Exception as e:  # one failing strategy must not hide the others: report it
            failures.append({"strategy": name, "workers": n, "kind": kind, "error": str(e),
                             "traceback": traceback.format_exc()})


def _write_tour(records, failures, out, emulate, *, interrupted: str | None = None) -> Path:
    """records.json and results.md first (the data), then the HTML report; a figure that
    fails becomes a note in the report instead of losing the runs, and a file that cannot be
    written (a full disk) does not stop the others from being tried (`files.write_all`)."""
    out = Path(out)
    data_error = None
    try:
        write_all([("tour records", out / "records.json", lambda _: write_records(records, out)),
                   ("results table", out / "results.md",
                    lambda p: write_text(p, results_markdown(records), what="results table"))])
    except OSError as e:  # raised once the report was tried too
        data_error = e
    try:
        extra_figures, notes = _extra_figures(records, emulate)
    except Exception as e:  # the runs are the result; a figure must not take them down
        extra_figures, notes = [], [f"FAILED: the extra figures: {' '.join(str(e).split())}"]
    notes += [f"FAILED: {f['strategy']} ×{f['workers']} ({f['kind']}): "
              f"{(f['error'].splitlines() or [''])[0]}" for f in failures]
    if interrupted:
        notes.append(f"INTERRUPTED ({interrupted}) after {len(records)} run(s): the report shows those.")
    report = write_report(records, out, title="mgpukit tour", extra_figures=extra_figures, notes=notes)
    if data_error is not None:
        raise data_error
    return report


def _extra_figures(records, profile: str):
    """Emulated DDP scaling and the predicted 70B plan."""
    figs, notes = [], []
    emulated = [r for r in records if r["mode"] == "emulated" and r["strategy"] == "ddp"]
    if len(emulated) >= 2 and any(r["world_size"] == 1 for r in emulated):
        figs.append((f"DDP strong scaling of {EMULATED['model']} on {profile} (emulated in shape mode: "
                     f"same global batch split over more GPUs)",
                     plot_speedup(emulated)))
    figs_plan, note = _predicted_plan(profile)
    figs += figs_plan
    notes.append(note)
    return figs, notes


def _predicted_plan(profile: str):
    """The cost model's answer for 70B on 64 GPUs of `profile` (dp8 × tp8, ZeRO-1, SP)."""
    layout = Layout.from_global_batch(global_batch=512, dp=8, tp=8, pp=1, zero=1, sp=True,
                                      checkpointing="selective")
    p = planner.plan("70b", 64, load_profile(profile), layout)
    record = {"strategy": "plan 70b dp8·tp8 ZeRO-1", "mode": "analytic", "world_size": 64,
              "dims": {"dp": 8, "tp": 8, "pp": 1},
              "memory": {"0": {k: p.memory[k] for k in ("params", "grads", "optimizer", "activations")}
                         | {"peak": p.memory["total"]}}}
    note = (f"predicted (cost model): 70B on 64×{profile}, dp8·tp8·pp1, ZeRO-1, SP, selective "
            f"checkpointing, global batch 512: {p.memory['total'] / 2**30:.1f} GiB per GPU "
            f"({'fits' if p.fits else 'does NOT fit'}), step {p.step_time_s:.1f} s, MFU {p.mfu:.0%}. "
            f"Try `mgpukit plan --model 70b --gpus 64 --search`.")
    return [("Predicted memory per GPU: 70B on 64 GPUs (cost model)", plot_memory(record))], note


def results_markdown(records) -> str:
    """The summary table as Markdown — what the README's results section shows."""
    lines = ["| strategy | source | ranks | final loss | step (ms) | tokens/s | peak MiB/rank | MB sent/step/rank | parity |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in table_summary(records) if records else []:
        def f(v, spec, scale=1.0):
            return format(v * scale, spec) if v is not None else "–"
        parity = {True: "ok", False: "FAIL", None: "–"}[r["parity_ok"]]
        lines.append(f"| {r['strategy']} | {r['source_label']} | {r['world_size']} | "
                     f"{f(r['final_loss'], '.3f')} | {f(r['median_step_time_s'], '.3g', 1e3)} | "
                     f"{f(r['tokens_per_s'], '.0f')} | {f(r['peak_memory_bytes'], '.2f', 2**-20)} | "
                     f"{f(r['bytes_sent_per_step'], '.3f', 1e-6)} | {parity} |")
    return "\n".join(lines) + "\n"


def machine_line() -> str:
    """The machine a table was measured on, in one line: GPUs, or CPU cores, and versions."""
    env = env_info()
    devices = (f"{len(env['gpus'])} × {env['gpus'][0]['name']}" if env["gpus"]
               else f"{env['cores']} CPU cores ({cpu_name()}), no GPU")
    return (f"{devices}, {env['memory_bytes'] / 2**30:.0f} GiB RAM; torch {env['torch']}, "
            f"accelerate {env['accelerate']}, Python {env['python']}")


def update_readme(path: str | Path, table: str, *, command: str) -> None:
    """Replace the README's results block (between the markers) with `table`."""
    path = Path(path)
    text = path.read_text()
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    if start not in text or end not in text:
        raise ValueError(f"{path} has no {start} … {end} block to update.")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    stamp = time.strftime("%Y-%m-%d")
    block = f"{start}\n_Generated by `{command}` on {stamp}, on {machine_line()}._\n\n{table}{end}"

    write_text(path, head + block + tail)


def check_readme(path: str | Path) -> None:
    """The README to update exists and has the results markers (checked before the tour)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--update-readme {path}: no such file.")
    text = path.read_text(errors="replace")
    if "<!-- results:start -->" not in text or "<!-- results:end -->" not in text:
        raise ValueError(f"{path} has no <!-- results:start --> … <!-- results:end --> block to update.")


def _tour_command(args):
    if args.update_readme:
        check_readme(args.update_readme)
    out = run_tour(workers=args.workers, steps=args.steps, out=args.out, emulate=args.emulate,
                   only=args.only)
    print(format_summary(out["records"]))
    for f in out["failures"]:
        print(f"FAILED {f['strategy']} ×{f['workers']} ({f['kind']}):\n{f['error']}")
    print(f"report written to {out['report']}")
    if args.update_readme:
        update_readme(args.update_readme, results_markdown(out["records"]),
                      command="mgpukit tour --update-readme README.md")
        print(f"results table written into {args.update_readme}")
    return 1 if out["failures"] else 0


def register(sub):
    p = sub.add_parser("tour", help="run every strategy on the devices present; write report/index.html")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="ranks per run (default: every GPU, or 2 CPU workers)")
    p.add_argument("--steps", type=positive_int, default=10)
    p.add_argument("--out", default="report")
    p.add_argument("--emulate", default="h100-nvlink", help="profile for the emulated part")
    p.add_argument("--only", nargs="*", default=None, help="run only these strategies")
    p.add_argument("--update-readme", metavar="README", default=None,
                   help="write the summary table into the README's results block")
    p.set_defaults(func=_tour_command)
