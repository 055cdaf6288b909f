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
    assert not experiment.compare(rec, None, ref, None)["ok"]
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


def test_fp16_is_refused_with_what_to_change():
    with pytest.raises(ValueError, match="loss scaler.*use dtype='bf16'"):
        experiment.prepare("dp-naive", workers=2, layout={"dtype": "fp16"})


def test_cli_takes_dtype():
    assert main(["run", "dp-naive", "--dtype", "bf16", "--steps", "3", "--workers", "2"]) == 0
