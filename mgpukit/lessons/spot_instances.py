"""Notebook 10, spot instances: a preempted run restarted from its checkpoints, and what spot saves.

Measured: `preempted_run` kills rank 1 (SIGKILL, as a reclaimed instance) after the steps it is
told and restarts the job from the latest checkpoint until it finishes, counting the steps run
twice. Predicted: `spot_verdicts` prices that loss — work redone since the last checkpoint, the
checkpoints' own time, the restarts — against the discount, over a grid of preemption rates
and checkpoint intervals (`mgpukit.costmodel.spot`); `SPOT` is the one grid the notebook's
figure and the articles' claims (`lessons.claims`) both read.
"""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from mgpukit.costmodel import spot
import mgpukit.experiment as ex
from mgpukit.experiment import run
from mgpukit.lessons.tables import markdown_table
from mgpukit.runtime.failures import WorkerError


@contextlib.contextmanager
def _preempting(at_steps, marks: Path):
    """Workers are forked from this process: wrap the checkpoint seam so that rank 1 dies
    (SIGKILL, as a reclaimed instance) after finishing each step in `at_steps` — once each (a
    mark file remembers), before that step's checkpoint would be written."""
    real = ex.checkpointing

    def checkpointing(ctx, rec, cfg, parts, optimizer):
        ck = real(ctx, rec, cfg, parts, optimizer)
        save = ck.on_step_end

        def on_step_end(step):
            mark = marks / f"preempted-{step}"
            if step in at_steps and ctx.rank == 1 and not mark.exists():
                mark.touch()
                os.kill(os.getpid(), signal.SIGKILL)
            save(step)
        ck.on_step_end = on_step_end
        return ck

    ex.checkpointing = checkpointing
    try:
        yield
    finally:
        ex.checkpointing = real


def preempted_run(folder: str | Path, *, strategy: str = "ddp", steps: int = 12, checkpoint_every: int = 3,
                  preempt_at=(4, 8), **kw) -> dict:
    """A run whose rank 1 is preempted (killed) after each step in `preempt_at` and restarted
    from the latest checkpoint, until it finishes. Returns the record, the restarts, and the
    steps run twice (the work lost since the last checkpoint)."""
    folder = Path(folder)
    ck = folder / "checkpoints"
    options = {"checkpoint_dir": str(ck), "checkpoint_every": checkpoint_every}
    restarts, resume = [], False
    with _preempting(set(preempt_at), folder):
        while True:
            try:
                rec = run(strategy, workers=2, steps=steps, parity=False, timeout_s=180,
                          options={**options, "resume": resume}, **kw)
                break
            except WorkerError as e:
                restarts.append(e.rank)
                resume = (ck / "latest").exists()
                if len(restarts) > len(preempt_at):
                    raise
    lost = sum(p + 1 - p // checkpoint_every * checkpoint_every for p in preempt_at)
    return {"record": rec, "restarts": restarts, "steps_redone": lost, "steps": steps}


SPOT = {"discounts": (0.6, 0.7, 0.9), "rates": (0.0, 0.1, 0.25, 0.5, 1.0, 2.0),
        "intervals_s": (300, 600, 1800, 3600, 4 * 3600), "checkpoint_s": 60.0, "restart_s": 300.0}
"""The one spot grid notebook 10's figure and its claims row both read (so they cannot disagree)."""


def spot_verdicts(*, discounts=SPOT["discounts"], rates=SPOT["rates"], intervals_s=SPOT["intervals_s"],
                  checkpoint_s: float = SPOT["checkpoint_s"], restart_s: float = SPOT["restart_s"]) -> list[dict]:
    """Savings on spot for each discount × preemption rate × checkpoint interval (predicted)."""
    rows = []
    for d in discounts:
        for r in spot.savings_grid(discount=d, rates=rates, intervals_s=intervals_s,
                                   checkpoint_s=checkpoint_s, restart_s=restart_s):
            rows.append({"discount": d, **r})
    return rows


def best_savings(grid: list[dict]) -> list[dict]:
    """Per (discount, preemption rate): the savings at the best checkpoint interval of the grid."""
    best: dict[tuple, dict] = {}
    for r in grid:
        key = (r["discount"], r["preemptions_per_hour"])
        if key not in best or r["savings"] > best[key]["savings"]:
            best[key] = r
    return list(best.values())


def max_rate_holding(grid: list[dict], discount: float, floor: float = 0.6) -> float | None:
    """The highest preemption rate of the grid at which `discount` still saves >= `floor`
    (best checkpoint interval), or None."""
    ok = [r["preemptions_per_hour"] for r in best_savings(grid) if r["discount"] == discount and r["savings"] >= floor]
    return max(ok) if ok else None



def holding_markdown(grid: list[dict], floor: float = 0.6) -> str:
    """Per discount of the grid: the highest preemption rate that still saves >= `floor` at the
    best checkpoint interval ("none" when no rate does), and the best savings at all (predicted)."""
    best = best_savings(grid)
    rows = []
    for d in sorted({r["discount"] for r in grid}):
        rate = max_rate_holding(grid, d, floor)
        rows.append([f"{d:.0%}", "none" if rate is None else f"{rate:g}/h",
                     f"{max(r['savings'] for r in best if r['discount'] == d):.1%}"])
    return markdown_table(["discount", f"highest rate saving ≥ {floor:.0%}", "best savings"], rows)
