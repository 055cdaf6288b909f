"""The loop a learner reads, and the hooks an experiment installs around it (`training/hooks.py`).

Method: the trainer's source is read with `ast` (its size, no knob read in it); hooks are run
in this process on one rank (the `single` layout, mlp-tiny) and what they see is compared with
the documented protocol; the knobs a lesson needs turn into hooks (`knob_hooks.hooks_for`).
"""
import ast
import dataclasses
import time
from pathlib import Path

import pytest
import torch

import mgpukit
from mgpukit import strategies
from mgpukit.config import RunConfig
from mgpukit.measure.recorder import Recorder
from mgpukit.parallelize import parallelize
from mgpukit.prepare import prepare
from mgpukit.runtime.context import worker_context
from mgpukit.strategies.knobs import TRAINER_KNOBS
from mgpukit.training.backup import DropSlowest
from mgpukit.training.building import build_model, build_optimizer
from mgpukit.training.hooks import Hook, Loop
from mgpukit.training.knob_hooks import hooks_for
from mgpukit.training.lr_scaling import LrSchedule
from mgpukit.training.straggler import MarkIdle, Straggle
from mgpukit.training.trainer import train

TRAINER = Path(mgpukit.__file__).parent / "training" / "trainer.py"


def _function(name: str) -> ast.FunctionDef:
    tree = ast.parse(TRAINER.read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_train_is_the_loop_in_at_most_60_lines_reading_no_knob():
    """Was 105 lines, with `cfg.options.get` for the straggler, idle marking and drop-slowest."""
    fn = _function("train")
    assert fn.end_lineno - fn.lineno + 1 <= 60
    reads = [ast.unparse(n) for n in ast.walk(ast.parse(TRAINER.read_text()))
             if isinstance(n, ast.Attribute) and n.attr == "options"]
    assert reads == []
    assert len(TRAINER_KNOBS) <= 8  # was 17: the hooks' and the model's knobs are declared apart
    # no knob or branch names a lesson: the loop does not know the hooks it runs
    assert not {"straggler", "drop", "idle", "lr_at", "hetero"} & {
        n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}


def test_the_loop_has_no_field_of_a_lesson():
    """A straggler's slow-down is a hook's `around_compute`, a dropped backup worker an engine
    its hook empties: `Loop` keeps only what every run has (was: `slowed` and `computes`)."""
    assert {f.name for f in dataclasses.fields(Loop)} == {"ctx", "rec", "cfg", "parts", "optimizer",
                                                          "start_step", "logs"}


def _solo(layout=None):
    return worker_context(rank=0, world_size=1, mode="cpu", device=torch.device("cpu"),
                          t0=time.perf_counter(), threads=1, layout=layout, mesh=False)


def _single(steps=3, **options):
    cfg = prepare("single", workers=1, mode="cpu",
                  config=RunConfig(model="mlp-tiny", steps=steps, options=options)).cfg
    ctx = _solo(cfg.layout)
    rec = Recorder(ctx)
    parts = parallelize(build_model(cfg), cfg, ctx, rec, strategies.get("single"))
    return ctx, rec, cfg, parts, build_optimizer(cfg, parts.params)


class Trace(Hook):
    def __init__(self):
        self.seen = []

    def on_train_start(self, loop):
        self.seen.append("start")

    def before_forward(self, loop, step):
        self.seen.append(("before_forward", step))

    def after_backward(self, loop, step):
        grads = [p.grad for p in loop.parts.params if p.grad is not None]
        self.seen.append(("after_backward", step, bool(grads)))

    def after_sync(self, loop, step):
        self.seen.append(("after_sync", step))

    def after_step(self, loop, step):
        self.seen.append(("after_step", step, len(loop.rec.step_times)))

    def on_train_end(self, loop):
        self.seen.append("end")


def test_hooks_see_the_documented_points_in_order():
    ctx, rec, cfg, parts, opt = _single(steps=2)
    trace = Trace()
    train(ctx, rec, cfg, parts, opt, hooks=[trace])
    per_step = lambda s: [("before_forward", s), ("after_backward", s, True), ("after_sync", s),
                          ("after_step", s, s + 1)]  # after_step: the step's time was taken
    assert trace.seen == ["start", *per_step(0), *per_step(1), "end"]


class SkipStep1(Hook):
    """As `backup.DropSlowest` does: this rank's engine runs nothing at step 1."""

    def on_train_start(self, loop):
        engine, run = loop.parts.engine, loop.parts.engine.forward_backward
        engine.forward_backward = lambda *a, **kw: run(*a, **kw) if self.step != 1 else 0.0

    def before_forward(self, loop, step):
        self.step = step


def test_a_hook_that_skips_the_compute_leaves_the_weights_of_a_zero_gradient():
    """A dropped backup worker: no forward or backward, the gradient zero_grad left — with SGD
    and no momentum the weights do not move at that step."""
    ctx, rec, cfg, parts, opt = _single(steps=2)
    assert cfg.optimizer == "sgd"
    before = {}

    class Keep(Hook):
        def before_forward(self, loop, step):
            before[step] = [p.detach().clone() for p in loop.parts.params]

    weights = train(ctx, rec, cfg, parts, opt, hooks=[SkipStep1(), Keep()])
    for w, b in zip(weights.values(), before[1]):
        assert torch.equal(w, b)
    assert rec.losses[1] == 0.0


def test_the_knobs_turn_into_hooks_and_a_plain_run_installs_none():
    assert hooks_for(RunConfig(), 2) == []
    cfg = RunConfig(options={"straggler": {"rank": 1, "factor": 3}, "lr_scaling": "linear", "drop_slowest": 1})
    assert [type(h) for h in hooks_for(cfg, 2)] == [Straggle, LrSchedule, DropSlowest, MarkIdle]
    assert [type(h) for h in hooks_for(RunConfig(options={"show_idle": True}), 2)] == [MarkIdle]
    # the hook that trains other numbers than the reference declares it (the record says why)
    assert [h.no_parity is not None for h in hooks_for(cfg, 2)] == [False, False, True, False]


def test_the_learning_rate_rule_is_a_hook():
    ctx, rec, cfg, parts, opt = _single(steps=3, lr_scaling="linear", base_batch=4, warmup_steps=2)
    train(ctx, rec, cfg, parts, opt, hooks=hooks_for(cfg, 1))
    k = cfg.global_batch / 4
    assert rec.extra["lr"] == pytest.approx([cfg.lr, cfg.lr * (1 + k) / 2, cfg.lr * k])
