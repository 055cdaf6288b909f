"""Local SGD: H = 1 is data parallelism, bytes drop H-fold, ours matches Accelerate's LocalSGD.

Method. gpt-tiny on 2 gloo workers, 8 steps, SGD with momentum (the kit's default: an update
linear in the gradient and the momentum, which is what makes weight averaging after every step
equal to gradient averaging — `local_sgd.py`'s docstring). H = 1 is compared with torch DDP
(through Accelerate) on the losses per step and the final weights, at torch's fp32 tolerances;
with AdamW the same comparison must fail (the property is the optimizer's, not luck). Bytes are
the recorder's counters, DDP's (one gradient all-reduce per step) against local SGD's. The hand-written averaging and `accelerate.local_sgd.LocalSGD` must
train the same weights at H = 4.
"""
from __future__ import annotations

import pytest
import torch

from mgpukit.experiment import load_weights, run

STEPS = 8
_RUNS: dict = {}


def _run(name, tmp_path_factory, tag, **kw):
    """Each run once per session, with its final weights (several tests read the same run)."""
    if tag not in _RUNS:
        path = tmp_path_factory.mktemp(tag) / "w.safetensors"
        rec = run(name, workers=2, steps=STEPS, weights_path=path, **kw)
        _RUNS[tag] = rec, load_weights(path)
    return _RUNS[tag]


def _close(a: dict, b: dict, **tol) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], **tol)


def _bytes(rec) -> float:
    return sum(r["bytes_sent"] for r in rec["comm"].values())


def test_h1_is_ddp_for_sgd_with_momentum(tmp_path_factory):
    ddp, w_ddp = _run("ddp", tmp_path_factory, "ddp")
    local, w_local = _run("local-sgd", tmp_path_factory, "h1", options={"local_steps": 1})
    assert local["parity"]["ok"], local["parity"]
    torch.testing.assert_close(torch.tensor(local["losses"]), torch.tensor(ddp["losses"]))
    _close(w_local, w_ddp)


def test_h1_is_not_ddp_for_adam():
    """The test of the test: Adam is not linear in the gradient, so averaging weights after
    each rank's own step is not the step on the averaged gradient — parity must fail."""
    local = run("local-sgd", workers=2, steps=STEPS, optimizer="adamw", lr=1e-3,
                options={"local_steps": 1})
    assert not local["parity"]["ok"]
    assert local["parity"]["weights_max_abs_diff"] > 1e-4


def test_bytes_per_step_at_h4_are_a_quarter_of_ddp(tmp_path_factory):
    ddp, _ = _run("ddp", tmp_path_factory, "ddp")
    local, _ = _run("local-sgd", tmp_path_factory, "h4", options={"local_steps": 4})
    assert _bytes(local) / _bytes(ddp) == pytest.approx(0.25, rel=1e-9)
    assert local["comm"]["0"]["collectives"]["all_reduce"] == STEPS // 4  # one flat buffer per average
    assert _bytes(local) / 2 / STEPS == pytest.approx(local["theory"]["comm_bytes"], rel=1e-9)


def test_ours_matches_accelerates_local_sgd(tmp_path_factory):
    ours, w_ours = _run("local-sgd", tmp_path_factory, "h4", options={"local_steps": 4})
    acc, w_acc = _run("local-sgd", tmp_path_factory, "acc", options={"local_steps": 4, "impl": "accelerate"})
    assert ours["parity"]["ok"] and acc["parity"]["ok"]
    assert ours["losses"] == acc["losses"]
    _close(w_ours, w_acc, rtol=0, atol=0)
    # Accelerate's context averages once more on exit: 8 steps, H=4 -> 3 averages, not 2
    assert _bytes(acc) / _bytes(ours) == pytest.approx(1.5, rel=1e-9)
