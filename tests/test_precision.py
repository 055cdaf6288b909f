"""Mixed precision as a policy (`mgpukit.strategies.policies.precision`).

Method: a bf16 run is not bitwise fp32, so its check is the loss curve — every one of 50 steps
within rtol 0.05 of the fp32 single-process reference on the same batches — and the test of the
test shows the check is not vacuous (elementwise fp32 parity fails on the same run). Memory:
params + grads + optimizer state measured on a rank equal the cost model's mixed-precision
total (16Ψ with Adam: fp32 master, fp32 grads, m, v); the parameters stay fp32.
"""
from __future__ import annotations

import pytest
import torch

import mgpukit
from mgpukit import experiment
from mgpukit.cli import main
from mgpukit.config import RunConfig
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import model_state_bytes
from mgpukit.parity import compare
from mgpukit.strategies.policies.precision import apply_mixed_precision
from mgpukit.training.building import Batches, build_model, loss_fn


def test_autocast_runs_in_bf16_and_keeps_fp32_master_weights():
    cfg = RunConfig()
    model = apply_mixed_precision(build_model(cfg), "bf16")
    seen = []
    model.blocks[0].attn.q_proj.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    x, y = Batches(cfg)(0)
    logits = model(x)
    assert seen == [torch.bfloat16]
    assert logits.dtype == torch.float32  # the loss reads fp32
    loss_fn(cfg)(logits, y).backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())


def test_bf16_loss_curve_within_5_percent_of_fp32_over_50_steps():
    rec = mgpukit.run("dp-naive", workers=2, steps=50, layout={"dtype": "bf16"})
    assert rec["layout"]["dtype"] == "bf16" and rec["config"]["layout"]["dtype"] == "bf16"
    parity = rec["parity"]
    assert parity["method"].startswith("loss curve") and parity["dtype"] == "bf16"
    assert parity["ok"] and parity["max_rel_gap"] <= 0.05, parity
    # the test of the test: not bitwise fp32, so the elementwise check would fail
    ref = experiment.reference("single", experiment.prepare("dp-naive", workers=2, steps=50).cfg)
    assert not compare(rec, None, ref, None)["ok"]
    assert parity["max_abs_diff"] > 0


def test_bf16_pipeline_follows_the_fp32_curve():
    rec = mgpukit.run("pp-1f1b", workers=2, steps=10, layout={"dtype": "bf16", "checkpointing": "full"})
    assert rec["parity"]["ok"], rec["parity"]


def test_ddp_gets_the_policy_dtype_from_the_layout():
    rec = mgpukit.run("ddp", workers=2, steps=3, layout={"dtype": "bf16"})
    assert rec["extra"]["0"]["mixed_precision"] == "bf16"
    assert rec["parity"]["ok"], rec["parity"]


def test_memory_includes_the_fp32_master_copy():
    rec = mgpukit.run("dp-naive", workers=2, steps=2, optimizer="adamw", lr=1e-3, layout={"dtype": "bf16"},
                      parity=False)
    mem = rec["memory"]["0"]
    psi = build_model(RunConfig()).num_params()
    assert mem["params"] == 4 * psi  # the parameters are the fp32 master weights
    predicted = model_state_bytes(psi, Layout(dp=2, dtype="bf16"))
    assert mem["params"] + mem["grads"] + mem["optimizer"] == sum(predicted.values()) == 16 * psi


@pytest.mark.parametrize("strategy", ["dp-naive", "pp-1f1b"])
def test_fp16_with_loss_scaling_follows_the_fp32_curve(strategy):
    rec = mgpukit.run(strategy, workers=2, steps=10, layout={"dtype": "fp16"})
    assert rec["parity"]["ok"] and rec["parity"]["dtype"] == "fp16", rec["parity"]
    assert rec["extra"]["0"]["loss_scale"]["final"] > 1
    assert rec["comm"]["0"]["collectives"]["all_reduce"] >= 10  # the overflow flag, every step


def test_loss_scaler_skips_an_overflowing_step_and_backs_off():
    from mgpukit.strategies.policies.precision import LossScaler

    scaler = LossScaler(None, None, init_scale=8.0, growth_interval=2)
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([8.0, 16.0, 24.0])
    assert scaler.unscale_([p]) and torch.equal(p.grad, torch.tensor([1.0, 2.0, 3.0]))
    scaler.update(True)
    p.grad = torch.tensor([1.0, float("inf"), 0.0])
    assert not scaler.unscale_([p])
    scaler.update(False)
    assert scaler.scale == 4.0 and scaler.skipped == 1
    scaler.update(True), scaler.update(True)
    assert scaler.scale == 8.0  # doubled after growth_interval clean steps


def test_fp16_run_that_overflows_skips_the_step_and_halves_the_scale():
    """A real fp16 run started at a scale too large for fp16's range (max 65,504): the scaled
    gradients overflow, the step is skipped on every rank and S halves until they fit
    (notebook 07 shows this run)."""
    rec = mgpukit.run("dp-naive", workers=2, steps=4, layout={"dtype": "fp16"}, parity=False,
                      options={"loss_scale_init": 2.0 ** 20})
    for rank in ("0", "1"):
        ls = rec["extra"][rank]["loss_scale"]
        history = ls["history"]
        assert ls["skipped_steps"] >= 1 and not history[0]["applied"], ls
        for now, nxt in zip(history, history[1:]):
            assert nxt["scale"] == (now["scale"] / 2 if not now["applied"] else now["scale"]), history
        assert history[-1]["applied"] and ls["final"] < 2.0 ** 20


def test_cli_takes_dtype():
    assert main(["run", "dp-naive", "--dtype", "bf16", "--steps", "3", "--workers", "2"]) == 0


def test_notebook_07_answers_come_from_the_cost_model():
    from mgpukit.costmodel.shapes import get_shape, param_count
    from mgpukit.lessons import memory as lab

    psi = param_count(get_shape("7b"))
    assert lab.model_state_gb("7b") == pytest.approx(16 * psi / 1e9)
    shape = get_shape("7b")
    assert lab.activations_per_layer_gb("7b", checkpointing="full") == pytest.approx(
        2 * shape.seq_len * shape.d_model / 1e9)
    assert lab.smallest_zero_stage_that_fits("7b", 8) == 1  # DDP: 16Ψ ≈ 108 GB > 77.0 GB usable (the profile's)
    rows = {r["layout"]: r for r in lab.memory_table("70b", 64)}
    assert not rows["DDP"]["fits"] and rows["tp 8 + SP × pp 8"]["fits"]


def test_memory_explorer_draws_a_predicted_breakdown_headless():
    from mgpukit.widgets.memory import memory_explorer

    box = memory_explorer(model="70b", gpus=64)
    out = box.children[-1]
    text, figure = out.outputs[0]["text"], out.outputs[1]
    assert "predicted" in text and "fits with" in text and "tp 8" in text
    assert "predicted" in str(figure["data"]["text/plain"])
