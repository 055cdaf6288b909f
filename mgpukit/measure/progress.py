"""A progress bar for runs that take minutes: a real-scale model on CPU workers.

GPT-2 124M trains on a laptop's CPU, one step in tens of seconds to minutes; without a sign of
life that looks like a hang. Workers cannot draw in the notebook or the terminal (their output
is captured and replayed when they finish), so rank 0 appends one line per phase of each step
to a file — `step phase` — and the parent follows the file with a `tqdm` bar (`tqdm.auto`: a
widget in Jupyter, text in a terminal). Writing a line costs microseconds against phases of
seconds; runs of the tiny models do not write at all.

    with follow(path, steps=cfg.steps, desc="gpt2-124m · ddp"):   # in the parent
        launch(..., options={"progress_file": path})
    progress = StepProgress.for_rank(ctx)                          # in the trainer
    progress.tick(step, "forward+backward")
"""
from __future__ import annotations

import contextlib
import os
import threading

PHASES = ("data", "forward+backward", "gradient sync", "optimizer")  # per step, after "built"


class StepProgress:
    """Rank 0's side: one line per finished phase, appended and flushed."""

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def for_rank(cls, ctx) -> "StepProgress | None":
        path = ctx.options.get("progress_file")
        return cls(path) if path and ctx.rank == 0 else None

    def tick(self, step: int, phase: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{step} {phase}\n")


def tick(progress: "StepProgress | None", step: int, phase: str) -> None:
    if progress is not None:
        progress.tick(step, phase)


@contextlib.contextmanager
def follow(path: str, *, steps: int, desc: str, period_s: float = 0.5):
    """The parent's side: a tqdm bar over `steps` × the phases, fed from `path` until the block
    ends (the file is removed then)."""
    # lazy: start-up (tqdm.auto loads ipywidgets, ~0.2 s; only a real-scale run on CPU shows it)
    from tqdm.auto import tqdm

    open(path, "w").close()
    bar = tqdm(total=1 + steps * len(PHASES), desc=desc, unit="phase", leave=True,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]")
    done = threading.Event()

    def watch():
        seen = 0
        while True:
            stop = done.wait(period_s)
            try:
                with open(path) as f:
                    lines = f.read().splitlines()
            except OSError:
                lines = []
            if len(lines) > seen:
                step, _, phase = lines[-1].partition(" ")
                where = f"step {int(step) + 1}/{steps}: " if int(step) >= 0 else ""
                bar.set_postfix_str(f"{where}{phase}", refresh=False)
                bar.update(len(lines) - seen)
                seen = len(lines)
            if stop:
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join()
        bar.close()
        with contextlib.suppress(OSError):
            os.remove(path)
