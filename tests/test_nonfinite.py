"""A NaN or infinite loss or gradient stops training at its step, before the optimizer step
(weights unchanged), naming the step and the rank; parity never reports a NaN as exact; a
record holds no bare NaN token."""
import math
import time

import pytest
import torch

import mgpukit
from mgpukit import strategies
from mgpukit.config import RunConfig
from mgpukit.parity import compare
from mgpukit.prepare import prepare
from mgpukit.measure.recorder import Recorder
from mgpukit.parallelize import parallelize
from mgpukit.runtime.context import worker_context
from mgpukit.training import Checkpointing, train
from mgpukit.training.building import build_model, build_optimizer
from mgpukit.training.trainer import NonFiniteError


def _solo(layout=None):
    return worker_context(rank=0, world_size=1, mode="cpu", device=torch.device("cpu"),
                          t0=time.perf_counter(), threads=1, layout=layout, mesh=False)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_a_poisoned_gradient_stops_before_the_step_and_leaves_the_weights(poison):
    """Method: train in this process (one rank, the `single` layout); a hook turns one gradient
    element non-finite at step 2. The run must raise naming step 2 and rank 0, and the weights
    must equal those saved after step 1 — bit for bit."""
    cfg = prepare("single", workers=1, mode="cpu", config=RunConfig(model="mlp-tiny", steps=5)).cfg
    ctx = _solo(cfg.layout)
    parts = parallelize(build_model(cfg), cfg, ctx, Recorder(ctx), strategies.get("single"))
    opt = build_optimizer(cfg, parts.params)
    first = parts.params[0]
    step_now = {"step": 0}

    def poison_at_2(grad):
        if step_now["step"] == 2:
            grad = grad.clone()
            grad.view(-1)[0] = poison
        return grad
    first.register_hook(poison_at_2)
    saved = {}

    def after(step):
        step_now["step"] = step + 1
        saved[step] = [p.detach().clone() for p in parts.params]
    with pytest.raises(NonFiniteError, match=r"non-finite gradient .* at step 2 on rank 0"):
        train(ctx, Recorder(ctx), cfg, parts, opt, hooks=[Checkpointing(on_step_end=after)])
    assert sorted(saved) == [0, 1]
    for p, before in zip(parts.params, saved[1]):
        assert torch.equal(p.detach(), before)


def test_a_diverging_run_stops_with_a_message_naming_the_step_and_rank():
    """A learning rate of 1e30 blows the weights up after step 0: the launch must fail at step 1
    (not train to the end with exit 0), on a real 2-worker DDP run."""
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.run("ddp", workers=2, steps=6, lr=1e30, parity=False, timeout_s=120)
    message = str(info.value)
    assert "NonFiniteError" in message and "at step 1 on rank" in message


def _record(losses, norms):
    return {"strategy": "x", "losses": losses, "grad_norms": norms}


def test_parity_max_does_not_drop_nan():
    ref = {"record": _record([1.0, 1.0], [1.0, 1.0]), "weights": {"w": torch.zeros(2)}}
    out = compare(_record([1.0, float("nan")], [1.0, 1.0]), {"w": torch.zeros(2)}, ref, None)
    assert out["ok"] is False and math.isnan(out["losses_max_abs_diff"]) and math.isnan(out["max_abs_diff"])
    out = compare(_record([1.0, 1.0], [1.0, 1.0]), {"w": torch.tensor([0.0, float("nan")])}, ref, None)
    assert out["ok"] is False and math.isnan(out["weights_max_abs_diff"]) and math.isnan(out["max_abs_diff"])


def test_loss_curve_parity_keeps_nan():
    from mgpukit.strategies.compression.parity import loss_parity

    out = loss_parity(_record([1.0, float("nan"), 1.0], []), _record([1.0, 1.0, 1.0], []), rtol=0.1)
    assert out["ok"] is False and math.isnan(out["max_abs_diff"])


def test_a_saved_record_has_no_bare_nan_token(tmp_path):
    import json

    from mgpukit.measure.record import load_record, save_record

    path = save_record({"losses": [float("nan")], "parity": {"max_abs_diff": float("inf")}}, tmp_path / "r.json")
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert math.isinf(load_record(path)["parity"]["max_abs_diff"])


@pytest.mark.parametrize("strategy", ["ps-sync", "ps-async"])
def test_a_diverging_parameter_server_stops_naming_the_step_and_rank(strategy):
    """The parameter server runs its own loop (not the trainer's): it used to end with exit 0
    and a final loss of nan. Now its server stops before the update, and the CLI prints that
    one message (`WorkerError.one_line`), exit 1."""
    with pytest.raises(mgpukit.WorkerError) as info:
        mgpukit.run(strategy, workers=3, steps=4, lr=1e30, parity=False, timeout_s=120)
    line = info.value.one_line
    assert line and "non-finite" in line and "at step 1 on rank 0" in line, str(info.value)
    assert info.value.exit_code == 1
