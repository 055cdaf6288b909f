"""Time to train and cost (`costmodel.training_cost`, `mgpukit plan --tokens`) and the search's
bounds (`mgpukit plan --search`): every returned layout fits, the number considered is bounded.

Method: the arithmetic is checked against hand-computed figures (steps = ceil(tokens / tokens
per step), GPU-hours = steps · step time · GPUs / 3600), Kaplan's 6·N·D against the planner's
own FLOP count, and the CLI through `main(argv)` in-process. Timing is not asserted here (a
shared 2-core machine would make it flaky): `mgpukit bench search` measures it."""
import json
import math

import pytest

from mgpukit.cli import main
from mgpukit.costmodel import Layout, flops_per_step, get_shape, load_profile, param_count, plan
from mgpukit.costmodel.planner import candidate_layouts, search
from mgpukit.costmodel.training_cost import (parse_tokens, six_nd, time_to_train, token_budget,
                                             tokens_for_gpu_hours)


@pytest.fixture(scope="module")
def plan_7b():
    return plan("7b", 64, "h100-ib", Layout.from_global_batch(global_batch=1024, dp=64, zero=1,
                                                             checkpointing="selective"))


@pytest.mark.parametrize("text, value", [("2T", 2e12), ("300B", 3e11), ("1.5e12", 1.5e12), ("2_000_000", 2e6),
                                         ("1.5M", 1.5e6), ("7k", 7e3), (1e9, 1e9)])
def test_token_counts_parse(text, value):
    assert parse_tokens(text) == value


@pytest.mark.parametrize("text", ["abc", "-5", "0", "inf", "nan", "2X", "", True])
def test_bad_token_counts_are_refused(text):
    with pytest.raises(ValueError, match="--tokens"):
        parse_tokens(text)


def test_epochs_of_a_dataset_are_a_token_budget():
    assert token_budget(epochs=3, dataset_tokens="100B") == 3e11
    assert token_budget(tokens="1T") == 1e12
    for bad in (dict(), dict(epochs=2), dict(dataset_tokens="1T"), dict(tokens="1T", epochs=1),
                dict(epochs=-1, dataset_tokens="1T")):
        with pytest.raises(ValueError):
            token_budget(**bad)


def test_time_to_train_is_steps_times_step_time(plan_7b):
    tokens = 2e12
    b = time_to_train(plan_7b, tokens, price_per_gpu_hour=2.0)
    per_step = 1024 * plan_7b.model.seq_len  # Llama 2's 4M-token batch
    assert b["tokens_per_step"] == per_step == 4_194_304
    assert b["steps"] == math.ceil(tokens / per_step)
    assert b["seconds"] == pytest.approx(b["steps"] * plan_7b.step_time_s)
    assert b["gpu_hours"] == pytest.approx(b["seconds"] * 64 / 3600)
    assert b["cost"] == pytest.approx(2.0 * b["gpu_hours"])
    assert time_to_train(plan_7b, tokens)["cost"] is None
    # twice the price: twice the cost; twice the tokens: (about) twice the time
    assert time_to_train(plan_7b, tokens, price_per_gpu_hour=4.0)["cost"] == pytest.approx(2 * b["cost"])
    assert time_to_train(plan_7b, 2 * tokens)["seconds"] == pytest.approx(2 * b["seconds"], rel=1e-5)


def test_six_nd_agrees_with_the_planners_flops_and_mfu(plan_7b):
    """6·N·D leaves out attention's s-dependent matmuls (QKᵀ, AV: 12·s·h FLOPs per token per layer
    in forward + backward), 12% of a 7B step at 4k context: below the planner's count, within 15%."""
    n, tokens = param_count(get_shape("7b")), 2e12
    est = six_nd(n, tokens, peak_flops=plan_7b.profile.flops("bf16"), mfu=plan_7b.mfu)
    steps = tokens / (1024 * 4096)
    exact = flops_per_step(get_shape("7b"), 1024)["model"] * steps
    shape = get_shape("7b")
    attention = 12 * shape.seq_len * shape.d_model * shape.n_layer * tokens
    assert est["flops"] < exact and est["flops"] == pytest.approx(exact, rel=0.15)
    assert est["flops"] + attention == pytest.approx(exact, rel=0.02)
    assert est["gpu_hours"] == pytest.approx(time_to_train(plan_7b, tokens)["gpu_hours"], rel=0.15)
    assert "6 · N · D" in est["arithmetic"] and "GPU-hours" in est["arithmetic"]
    back = tokens_for_gpu_hours(est["gpu_hours"], n, peak_flops=plan_7b.profile.flops("bf16"), mfu=plan_7b.mfu)
    assert back == pytest.approx(tokens)


def test_plan_prints_time_and_cost_and_writes_them(tmp_path, capsys):
    path = tmp_path / "p.json"
    assert main(["plan", "--model", "7b", "--gpus", "64", "--profile", "h100-ib", "--global-batch", "1024",
                 "--zero", "1", "--ckpt", "selective", "--tokens", "2T", "--price-per-gpu-hour", "2.5",
                 "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "predicted time to train" in out and "GPU-hours" in out and "predicted cost" in out
    training = json.loads(path.read_text())["training"]
    assert training["steps"] == math.ceil(2e12 / (1024 * 4096))
    assert training["cost"] == pytest.approx(2.5 * training["gpu_hours"])


def test_search_with_tokens_ranks_by_time_and_prices_each_row(tmp_path, capsys):
    path = tmp_path / "s.json"
    assert main(["plan", "--model", "70b", "--gpus", "64", "--profile", "h100-ib", "--search", "--top", "4",
                 "--epochs", "1", "--dataset-tokens", "2T", "--price-per-gpu-hour", "2", "--json", str(path)]) == 0
    assert "time to train" in capsys.readouterr().out
    rows = json.loads(path.read_text())["plans"]
    hours = [r["training"]["gpu_hours"] for r in rows if r["fits"]]
    assert hours == sorted(hours)  # same GPU count: fastest step = fewest GPU-hours = cheapest


# issue 37 widened the search (micro-batches dividing a replica's batch up to 16, v up to one layer per
# chunk, cp, tp overlap): ~11.8K and ~9.3K layouts, still timed under 2 s (tests/test_search.py)
@pytest.mark.parametrize("gpus, bound", [(64, 15_000), (1024, 15_000)])
def test_search_considers_a_bounded_number_of_layouts_and_returns_only_fitting_ones(gpus, bound):
    """Pruned as in Narayanan et al. 2021 §3.3: tp within a node, pp up to the layers (uneven
    stages, balanced by cost). The bound is loose; it fails if a change makes the search
    enumerate, e.g., every dp × tp × pp."""
    hw = load_profile("h100-ib")
    shape = get_shape("70b")
    layouts = list(candidate_layouts(shape, gpus, hw, global_batch=512))
    assert 0 < len(layouts) <= bound
    assert all(lay.tp <= hw.gpus_per_node and lay.pp <= shape.n_layer for lay in layouts)
    assert all(sum(lay.stage_layers) == shape.n_layer for lay in layouts if lay.stage_layers)
    plans = search(shape, gpus, hw, global_batch=512, top=20)
    assert plans and all(p.fits and p.memory["total"] <= hw.usable_memory_bytes for p in plans)
    times = [p.step_time_s for p in plans]
    assert times == sorted(times)


def test_mgpukit_plan_never_imports_torch():
    """`mgpukit plan --search` used to spend 4 of its 5 s importing torch through the other
    subcommands; the CLI now builds only `plan` when that is the command."""
    import subprocess
    import sys

    code = ("import sys; from mgpukit.cli import main; "
            "rc = main(['plan', '--model', '70b', '--gpus', '64', '--profile', 'h100-ib', '--search', '--top', '2']); "
            "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ranked by predicted step time" in proc.stdout
