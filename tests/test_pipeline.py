"""Model and pipeline parallelism: stage split, executor, strategies, measured bubble and memory.

Method: numerical parity against the single-process reference (losses, gradient norms and
final weights after 3 steps) on CPU workers over gloo, at PyTorch's pipelining tolerance
(rtol 1e-5, atol 4e-5: micro-batch gradients are added in a different order); a deliberately
broken variant (micro-batch losses not scaled by 1/m) must fail it. The executor's timeline
is compared action by action with the schedule table. Bubble and activation memory are
measured by the runs themselves — emulated (virtual clock, free point-to-point) on the lab's
equal-cost stages — and compared with the closed forms.
"""
import pytest
import torch

from mgpukit.config import RunConfig
from mgpukit.costmodel.schedules import Action, build_schedule
from mgpukit.experiment import run
from mgpukit.models import GPT, gpt_tiny
from mgpukit.strategies import registry
from mgpukit.lessons import run_lab
from mgpukit.strategies.pipeline.engine import apply_pipeline
from mgpukit.strategies.pipeline.pipeline_parallel import PARITY_TOLERANCE, pipeline_layout
from mgpukit.prepare import prepare
from mgpukit.training.building import Batches, build_model, build_optimizer, loss_fn
from mgpukit.training.trainer import train
from mgpukit.strategies.pipeline.plan import plan_for
from mgpukit.strategies.pipeline.split_backward import (WeightGradCapture, backward_input,
                                                        backward_weight)
from mgpukit.strategies.pipeline.stages import split_model

KINDS = {"fwd": "F", "bwd": "B", "bwd_input": "I", "bwd_weight": "W"}
TIMEOUT = 120  # a hung launch fails the test in minutes, not the default ten


def executed(record: dict, rank: int, step: int = 0) -> list[Action]:
    """The actions rank ``rank`` ran in ``step``, in order, read back from the timeline."""
    return [Action(KINDS[e["kind"]], e["microbatch"], e["stage"]) for e in record["timeline"]
            if e["rank"] == rank and e.get("step") == step and e["kind"] in KINDS]


# ------------------------------------------------------------------ no launch


def test_split_keeps_full_model_names_and_output():
    model = GPT(gpt_tiny())
    x = torch.randint(0, 64, (2, 16))
    for n in (1, 2, 4):
        stages = split_model(model, n)
        names = [k for s in stages.values() for k in s.state_dict()]
        assert sorted(names) == sorted(model.state_dict())  # full-model names, each once
        assert "embed.tok.weight" in stages[0].state_dict()
        assert "head.lm_head.weight" in stages[n - 1].state_dict()
        h = x
        for s in range(n):
            h = stages[s](h)
        torch.testing.assert_close(h, model(x), rtol=0, atol=0)


def test_layers_not_divisible_by_stages_is_refused_with_choices():
    with pytest.raises(ValueError, match=r"4 transformer blocks, which cannot be cut into 3 "
                                         r"equal pipeline stages.*workers in \[1, 2, 4\]"):
        plan_for("1f1b", RunConfig(), 3)
    with pytest.raises(ValueError, match=r"8 equal pipeline stages \(p=4 ranks × v=2"):
        plan_for("interleaved", RunConfig(), 4, v=2)
    assert plan_for("1f1b", RunConfig(), 4).m == 8  # default m = 2p


def test_split_backward_equals_full_backward():
    """I then W gives the gradients of one full backward; I alone forms no weight gradient."""
    model = GPT(gpt_tiny())
    stage = split_model(model, 2)[1]
    x = torch.randn(2, 64, 64)
    y = torch.randint(0, 64, (2, 64))
    loss_of = loss_fn(RunConfig())
    loss_of(stage(x.clone().requires_grad_()), y).backward()
    full = {k: p.grad.clone() for k, p in stage.named_parameters()}
    stage.zero_grad(set_to_none=True)

    cap = WeightGradCapture([stage])
    xi = x.clone().requires_grad_()
    with cap.capture([]) as captured:
        out = loss_of(stage(xi), y)
    grad_x, grads_out = backward_input(out, None, xi, captured)
    assert grad_x is not None and all(p.grad is None for p in stage.parameters())
    backward_weight(captured, grads_out)
    for k, p in stage.named_parameters():
        torch.testing.assert_close(p.grad, full[k], rtol=1e-6, atol=1e-7)


def test_bad_config_is_refused_before_launch(monkeypatch):
    import mgpukit.experiment as experiment

    def no_launch(*args, **kwargs):
        raise AssertionError("launched a configuration that cannot run")

    monkeypatch.setattr(experiment, "launch", no_launch)
    for name in ("pp-1f1b", "pp-native-1f1b"):
        with pytest.raises(ValueError, match="cannot be cut into 3 equal pipeline stages"):
            run(name, workers=3, steps=1, mode="cpu")
    with pytest.raises(ValueError, match="only applies to the interleaved schedule"):
        run("pp-gpipe", workers=2, steps=1, mode="cpu", options={"v": 2})


@pytest.mark.parametrize("name", ["naive", "gpipe", "1f1b", "interleaved", "zb-h1"])
def test_rounds_pair_every_message_and_keep_the_table(name):
    """p2p.plan_rounds: each rank runs exactly its column of the table; every message is
    posted by its two ends in the same round (what makes the batches deadlock-free), after
    the round that produced it and no later than the round that consumes it."""
    from mgpukit.strategies.pipeline.p2p import input_of, output_of, plan_rounds

    for p in (2, 3, 4):
        for m in (p, 2 * p):
            for v in ((1, 2, 3) if name == "interleaved" else (1,)):
                table = build_schedule(name, p, m, v)
                rounds = plan_rounds(table)
                assert [[r.action for r in rs if r.action] for rs in rounds] == table
                sent = {(msg, r.index) for rs in rounds for r in rs for msg in r.sends}
                got = {(msg, r.index) for rs in rounds for r in rs for msg in r.recvs}
                assert sent == got and len(sent) == sum(
                    output_of(a, p * v) is not None for col in table for a in col)
                at = {r.action: r.index for rs in rounds for r in rs if r.action}
                for msg, k in sent:
                    producer = next(a for a in at if output_of(a, p * v) == msg)
                    consumer = next(a for a in at if input_of(a, p * v) == msg)
                    assert at[producer] < k <= at[consumer]


# ------------------------------------------------------------------ parity (launched)


@pytest.mark.parametrize("name", ["mp-naive", "pp-gpipe", "pp-1f1b", "pp-interleaved", "pp-zb",
                                  "pp-native-gpipe", "pp-native-1f1b", "pp-native-interleaved"])
def test_parity_p2(name):
    rec = run(name, workers=2, steps=3, mode="cpu", timeout_s=TIMEOUT)
    par = rec["parity"]
    assert par["tolerance"] == PARITY_TOLERANCE  # the strategy's registered tolerance
    assert par["ok"] and par["weights_checked"], par
    th = rec["theory"]
    if "native" not in name:
        for r in range(2):  # the executor ran exactly the table
            assert executed(rec, r) == build_schedule(th["schedule"], 2, th["m"], th["v"])[r]
    if name == "pp-gpipe":  # GPipe holds all m micro-batches, measured by the meter
        held = rec["extra"]["0"]["microbatches_in_flight_measured"]
        assert held == pytest.approx(th["m"], rel=0.05)
    if name == "pp-1f1b":
        assert all(e["microbatches_in_flight_measured"] <= 2 * 1.05 for e in rec["extra"].values())


def test_parity_p4_zero_bubble():
    rec = run("pp-zb", workers=4, steps=3, mode="cpu", tolerance=PARITY_TOLERANCE,
              timeout_s=TIMEOUT)
    assert rec["parity"]["ok"], rec["parity"]
    for r in range(4):
        assert executed(rec, r) == build_schedule("zb-h1", 4, 8)[r]


def _unscaled(ctx, rec, cfg):
    """Broken on purpose: each micro-batch's loss counts m times (the 1/m scaling undone)."""
    m = cfg.layout.num_micro_batches
    base = loss_fn(cfg)
    parts = apply_pipeline(ctx, rec, build_model(cfg), cfg.layout, lambda out, y: m * base(out, y))
    return {"weights": train(ctx, rec, cfg, parts, build_optimizer(cfg, parts.params))}


def test_parity_catches_a_missing_average():
    if "pp-test-unscaled" not in {s.name for s in registry.available()}:
        registry.register("pp-test-unscaled", family="test", description="broken on purpose",
                          layout=pipeline_layout("1f1b"), schedule="1f1b", worker=_unscaled)
    rec = run("pp-test-unscaled", workers=2, steps=2, mode="cpu", tolerance=PARITY_TOLERANCE,
              timeout_s=TIMEOUT)
    assert not rec["parity"]["ok"]


# ------------------------------------------------------------------ measured vs theory


@pytest.fixture(scope="module")
def lab():
    """One emulated launch, p=4, equal-cost stages, free point-to-point."""
    specs = [{"schedule": "gpipe", "m": 8}, {"schedule": "1f1b", "m": 8},
             {"schedule": "interleaved", "m": 8, "v": 2}, {"schedule": "zb-h1", "m": 8}]
    return {r["theory"]["schedule"]: r for r in run_lab(specs, p=4, timeout_s=TIMEOUT)}


def test_lab_runs_the_tables_p4(lab):
    for name, rec in lab.items():
        table = build_schedule(name, 4, 8, rec["theory"]["v"])
        assert [executed(rec, r, step=1) for r in range(4)] == table


def test_emulated_bubble_matches_theory(lab):
    for name in ("gpipe", "1f1b"):
        rec = lab[name]
        assert rec["bubble_fraction"] == pytest.approx(3 / (8 + 3), abs=0.02)
        assert rec["theory"]["bubble_fraction"] == pytest.approx(3 / 11)
    idle = {n: sum(lab[n]["extra"]["0"]["idle_s"]) for n in lab}
    assert idle["interleaved"] <= 0.55 * idle["1f1b"]
    assert idle["zb-h1"] <= 0.5 * idle["1f1b"]


def test_the_lab_runs_the_layout_prepare_resolved(lab):
    """The lab's runs go through `prepare` (issue 28): each record carries the resolved
    layout its workers ran — the spec's m, its v, one stage per rank — and its theory."""
    for name, rec in lab.items():
        assert rec["layout"]["schedule"] == name and rec["layout"]["pp"] == 4
        assert rec["layout"]["num_micro_batches"] == rec["theory"]["m"] == 8
        assert rec["layout"]["v"] == rec["theory"]["v"] == (2 if name == "interleaved" else 1)


def test_a_layout_asks_for_its_micro_batches_one_included():
    """`micro_batches=1` lets a pipeline pick 2p; the layout's `num_micro_batches` asks exactly."""
    assert prepare("pp-1f1b", workers=4).layout.num_micro_batches == 8
    assert prepare("pp-1f1b", workers=4, layout={"num_micro_batches": 1}).layout.num_micro_batches == 1
    assert prepare("ddp", workers=2, global_batch=8, layout={"num_micro_batches": 2}).layout.num_micro_batches == 2
    assert prepare("mp-naive", workers=2, micro_batches=4).layout.num_micro_batches == 1  # naive: whole batch
    assert prepare("mp-naive", workers=2, layout={"num_micro_batches": 4}).layout.num_micro_batches == 4
    with pytest.raises(ValueError, match="num_micro_batches=0"):
        prepare("pp-1f1b", workers=4, layout={"num_micro_batches": 0})


def test_the_model_knobs_size_the_model_and_ask_for_the_input_gradient():
    cfg = RunConfig(model="mlp-tiny", options={"model_sizes": {"d_in": 16, "n_layers": 8}, "input_grad": True})
    assert (cfg.model_config().d_in, cfg.model_config().n_layers) == (16, 8)
    x, y = Batches(cfg)(0)
    assert x.shape[1] == 16 and x.requires_grad and x.is_leaf and not y.requires_grad
    with pytest.raises(ValueError, match="does not size 'mlp-tiny'"):
        prepare("pp-1f1b", workers=2, model="mlp-tiny", options={"model_sizes": {"n_heads": 2}})
    with pytest.raises(ValueError, match="input_grad=true needs an input of numbers"):
        prepare("pp-1f1b", workers=2, options={"input_grad": True})


def test_activations_in_flight_gpipe_m_1f1b_at_most_p(lab):
    for r in range(4):
        gpipe = lab["gpipe"]["extra"][str(r)]
        onef = lab["1f1b"]["extra"][str(r)]
        assert gpipe["microbatches_in_flight_measured"] == pytest.approx(8, rel=0.02)
        assert onef["microbatches_in_flight_measured"] == pytest.approx(4 - r, rel=0.02)
        assert onef["activations_in_flight_peak"] <= gpipe["activations_in_flight_peak"] / 2


# ------------------------------------------------------------------ uneven stages (issue 27)


def test_an_uneven_split_keeps_names_and_output_and_refuses_a_bad_count():
    model = GPT(gpt_tiny())
    x = torch.randint(0, 64, (2, 16))
    stages = split_model(model, 2, stage_layers=(3, 1))
    assert [len(s.blocks) for s in stages.values()] == [3, 1]
    assert sorted(k for s in stages.values() for k in s.state_dict()) == sorted(model.state_dict())
    torch.testing.assert_close(stages[1](stages[0](x)), model(x), rtol=0, atol=0)
    for bad in ((2, 1), (4, 0), (1, 1, 2)):
        with pytest.raises(ValueError, match="add up to the model's 4 transformer blocks"):
            split_model(model, 2, stage_layers=bad)


def test_uneven_stages_train_as_one_process_and_are_refused_before_launch(monkeypatch):
    """Method: parity against the single-process reference at the pipeline tolerance, with the
    first stage holding 3 of gpt-tiny's 4 blocks; a split that does not cover the model, or one
    given to the interleaved schedule, is refused before anything launches."""
    rec = run("pp-1f1b", workers=2, steps=3, mode="cpu", layout={"stage_layers": (3, 1)}, timeout_s=TIMEOUT)
    assert rec["parity"]["ok"] and rec["parity"]["weights_checked"], rec["parity"]
    assert tuple(rec["layout"]["stage_layers"]) == (3, 1)
    import mgpukit.experiment as experiment

    monkeypatch.setattr(experiment, "launch", lambda *a, **k: (_ for _ in ()).throw(AssertionError("launched")))
    with pytest.raises(ValueError, match="add up to the model's 4"):
        run("pp-1f1b", workers=2, steps=1, mode="cpu", layout={"stage_layers": (2, 1)})
    with pytest.raises(ValueError, match="whole numbers"):
        run("pp-1f1b", workers=2, steps=1, mode="cpu", layout={"stage_layers": "3,x"})
    with pytest.raises(ValueError, match="interleaved"):
        run("pp-interleaved", workers=2, steps=1, mode="cpu", layout={"stage_layers": (3, 1)})


def test_the_balanced_split_unloads_the_last_stage_and_the_closed_form_agrees_on_even():
    from mgpukit.costmodel.gpt_step import pipeline_step_time
    from mgpukit.costmodel.hardware import load_profile
    from mgpukit.lessons import fastest_split

    cure = fastest_split("gpt2-124m", stages=4, global_batch=8, micro_batches=8, profile="h100-nvlink")
    best, even = cure["best"], cure["even"]
    assert cure["tried"] == 165 and even["stage_layers"] == (3, 3, 3, 3)  # C(11, 3) splits of 12 blocks
    assert best["stage_layers"][-1] < 3 and best["slowest_stage_s"] < even["slowest_stage_s"]
    assert best["step_s"] < even["step_s"]
    cfg, hw = RunConfig(model="gpt2-124m").model_config(), load_profile("h100-nvlink")
    kw = dict(global_batch=8, micro_batches=8, stages=4, profile=hw, schedule="1f1b")
    assert pipeline_step_time(cfg, **kw)["total_s"] == pipeline_step_time(cfg, **kw, stage_layers=(3, 3, 3, 3))["total_s"]
