"""Activation checkpointing as a policy (`mgpukit.strategies.policies.checkpointing`).

Method: recomputation must not change a single number — gradients of the GPT with and without
each policy are compared bitwise in one process, and distributed runs with checkpointing on pass
the fp32 parity check against the plain single-process reference (a DP strategy, a pipeline).
Memory: the activation meter's peak, which counts what checkpointing keeps in forward *and*
what backward recomputes, falls by at least half under full checkpointing of the default GPT.
"""
from __future__ import annotations

import pytest
import torch

import mgpukit
from mgpukit import experiment
from mgpukit.cli import main
from mgpukit.config import RunConfig
from mgpukit.measure.memory import ActivationMeter
from mgpukit.strategies.policies.checkpointing import apply_checkpointing
from mgpukit.training.building import Batches, build_model, loss_fn


def _step(policy: str, cfg=RunConfig()):
    model = apply_checkpointing(build_model(cfg), policy)
    x, y = Batches(cfg)(0)
    meter = ActivationMeter(model.parameters())
    with meter.track():
        loss = loss_fn(cfg)(model(x), y)
    forward_peak = meter.peak
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return grads, forward_peak, meter


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_recomputation_changes_no_gradient(policy):
    want, _, _ = _step("none")
    got, _, _ = _step(policy)
    assert got.keys() == want.keys()  # parameter names unchanged (composable checkpoint)
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_full_checkpointing_halves_the_measured_activation_peak():
    _, _, plain = _step("none")
    _, forward_peak, full = _step("full")
    assert full.recomputed_peak > 0, "the recomputation during backward was not counted"
    assert full.peak >= forward_peak + full.recomputed_peak * 0.5
    assert full.peak <= 0.5 * plain.peak, (full.peak, plain.peak)
    assert full.live == 0 and plain.live == 0  # everything released after backward


def test_the_meter_counts_the_recomputation():
    """The test of the test: one recomputed block holds at least what the block keeps when it
    is not checkpointed (its saved tensors) minus its input."""
    cfg = RunConfig()
    model = build_model(cfg)
    x = model.embed(Batches(cfg)(0)[0]).detach()
    meter = ActivationMeter(model.parameters())
    with meter.track():
        model.blocks[0](x)
    _, _, full = _step("full")
    assert full.recomputed_peak >= meter.peak - x.numel() * x.element_size()


@pytest.mark.parametrize("strategy, layout", [
    ("dp-bucketed", {"checkpointing": "full"}),
    ("pp-1f1b", {"checkpointing": "full"}),
    ("pp-gpipe", {"checkpointing": "selective"}),
])
def test_parity_with_checkpointing(strategy, layout):
    rec = mgpukit.run(strategy, workers=2, steps=4, layout=layout)
    assert rec["layout"]["checkpointing"] == layout["checkpointing"]
    assert rec["config"]["layout"]["checkpointing"] == layout["checkpointing"]
    assert rec["parity"]["ok"], rec["parity"]
    assert rec["parity"]["max_abs_diff"] <= 1e-5


def test_a_checkpointed_single_run_is_not_the_cached_reference():
    experiment._REFERENCE_CACHE.clear()
    mgpukit.run("single", workers=1, steps=2, layout={"checkpointing": "full"})
    assert not experiment._REFERENCE_CACHE
    mgpukit.run("single", workers=1, steps=2)
    assert len(experiment._REFERENCE_CACHE) == 1


@pytest.mark.parametrize("strategy, layout, words", [
    ("pp-zb", {"checkpointing": "full"}, "zero-bubble"),
    ("dp-naive", {"checkpointing": "some"}, "checkpointing=.some.; choose one of"),
])
def test_refused_with_what_to_change(strategy, layout, words):
    with pytest.raises(ValueError, match=words):
        experiment.prepare(strategy, workers=2, layout=layout)


def test_selective_needs_attention():
    with pytest.raises(ValueError, match="no attention"):
        experiment.prepare("dp-naive", workers=2, model="mlp-tiny", layout={"checkpointing": "selective"})


def test_cli_takes_checkpointing(capsys):
    assert main(["run", "dp-naive", "--checkpointing", "full", "--steps", "2", "--workers", "2"]) == 0
    with pytest.raises(SystemExit) as exit_:
        main(["run", "dp-naive", "--checkpointing", "half", "--steps", "2"])
    assert exit_.value.code == 2
    assert "mgpukit: error:" in capsys.readouterr().err


def test_bench_prints_the_trade(capsys):
    from types import SimpleNamespace

    from mgpukit.bench.checkpointing import checkpointing_bench

    out = checkpointing_bench(SimpleNamespace(quick=True, repeats=1))
    assert out["ok"], out
    text = capsys.readouterr().out
    assert "recompute overhead" in text and "full" in text
