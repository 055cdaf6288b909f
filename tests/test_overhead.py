"""`bench overhead` and `bench gpu`: what they compare is the same training, and they run.

Method: the plain PyTorch loop and the kit's step train the same model from the same weights on
the same batches with the same optimizer — asserted on their losses, step by step, at fp32
tolerances (an overhead ratio between two different trainings would mean nothing). Timings are
not asserted (a shared machine); the ratios' presence and shape are. `bench gpu --mode cpu
--quick` is the CPU rehearsal of the GPU check (`make test-gpu MODE=cpu QUICK=1`).

What the time ratio cannot show on a CPU is pinned by counting: on a GPU these small models are
host-bound (each eager op costs its ~8-15 µs of host time whatever its size), so the kit's
overhead there is the ops and waits its step issues beyond the plain loop's.
"""
from __future__ import annotations

import collections
import contextlib
import time
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mgpukit.bench.overhead as overhead
from mgpukit import strategies
from mgpukit.bench.gpu import bench_gpu
from mgpukit.bench.overhead import measure_overhead, plain_steps
from mgpukit.config import RunConfig
from mgpukit.measure.recorder import Recorder
from mgpukit.parallelize import parallelize
from mgpukit.prepare import prepare
from mgpukit.runtime.context import worker_context
from mgpukit.training import train
from mgpukit.training.building import build_model, build_optimizer


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_plain_loop_trains_exactly_what_the_kit_trains(optimizer):
    out = measure_overhead(optimizer=optimizer, steps=4, repeats=1, mode="cpu", strategies=("single", "ddp"))
    for name in ("single", "ddp"):
        losses = out["rows"][name]["losses"]
        assert len(losses["plain"]) == len(losses["kit"]) == 4
        torch.testing.assert_close(torch.tensor(losses["kit"]), torch.tensor(losses["plain"]),
                                   rtol=1.3e-6, atol=1e-5)
        row = out["rows"][name]
        assert row["ratio"] > 0 and len(row["ratios"]) == 1 and row["kit"][0]["n"] == 3
    assert out["rows"]["single"]["held_to_target"] and not out["rows"]["ddp"]["held_to_target"]


def test_the_gpu_check_rehearses_on_cpu():
    args = types.SimpleNamespace(quick=True, mode="cpu", workers=None)
    result = bench_gpu(args)
    assert result["ok"], result
    assert [r["strategy"] for r in result["strategies"]] == ["ddp", "dp-bucketed", "zero3", "pp-1f1b"]
    assert all(r["ok"] for r in result["strategies"])
    assert result["overhead"][0]["rows"]["single"]["ratio"] > 0
    assert result["emulation"][0]["emulated_over_real"] > 0
    refusal = result["real_scale"][-1]
    assert refusal["model"] == "llama-7b" and refusal["refused_in_one_line"]


class _OpsPerStep(TorchDispatchMode):
    """Every aten op dispatched, filed under the step being run (`self.step`)."""

    def __init__(self):
        super().__init__()
        self.step = None
        self.ops = collections.defaultdict(collections.Counter)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self.step][str(func)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_kits_step_issues_the_plain_loops_ops_and_three_more(optimizer, monkeypatch):
    """Method: the kit's 1-worker step (`single`: the trainer, recorder, meter, gradient norm and
    finiteness check) and bench overhead's plain loop train gpt-tiny in this process under a
    dispatch mode; step 2 (after the activation meter's steps, not the last) is compared op by op.
    Allowed beyond the plain loop: the gradient norm's `_foreach_norm` and the `stack` that joins
    it with the loss, and the `detach` of the loss kept on the device — and no `.item()`
    (`_local_scalar_dense`): the loss and the norm come back in one copy (on a GPU, one wait).
    The old step issued 80 ops more (a `zero_` and an `add_` per parameter tensor, the split and
    `/ 1` of one micro-batch, the norm's square and sum) and 2 `.item()`s; this fails on it."""
    steps = 4
    cfg = prepare("single", workers=1, mode="cpu",
                  config=RunConfig(model="gpt-tiny", steps=steps, optimizer=optimizer, global_batch=8)).cfg
    ctx = worker_context(rank=0, world_size=1, mode="cpu", device=torch.device("cpu"),
                         t0=time.perf_counter(), threads=torch.get_num_threads(), layout=cfg.layout, mesh=False)
    rec = Recorder(ctx)
    parts = parallelize(build_model(cfg), cfg, ctx, rec, strategies.get("single"))
    opt = build_optimizer(cfg, parts.params)
    kit, timed_step = _OpsPerStep(), rec.step

    @contextlib.contextmanager
    def step(index):
        kit.step = index
        with timed_step(index):
            yield
        kit.step = None
    rec.step = step
    with kit:
        train(ctx, rec, cfg, parts, opt)

    plain, get_batch, seen = _OpsPerStep(), overhead.get_batch, []

    def batch(*args, **kwargs):  # the plain loop's step starts with its batch
        plain.step = len(seen)
        seen.append(1)
        return get_batch(*args, **kwargs)
    monkeypatch.setattr(overhead, "get_batch", batch)
    with plain:
        plain_steps(cfg, torch.device("cpu"), steps)  # its losses not asked for: not read

    mine, theirs = kit.ops[2], plain.ops[2]
    extra = {op: mine[op] - theirs[op] for op in set(mine) | set(theirs) if mine[op] != theirs[op]}
    # no .item() of the kit's own (AdamW's loop on CPU reads its step counters in both)
    assert mine["aten._local_scalar_dense.default"] == theirs["aten._local_scalar_dense.default"], extra
    assert sum(mine.values()) <= sum(theirs.values()) + 3, extra
    assert len(rec.losses) == steps and len(rec.grad_norms) == steps
