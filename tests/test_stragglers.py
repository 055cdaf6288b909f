"""Stragglers and their cures: re-balanced batches measured on throttled CPU workers, and
dropping the slowest rank (backup workers, Chen et al. 2016).

Method. (1) `split_by_speed` hands out rows exactly (a 1:3 speed ratio gives 6:2 of 8).
(2) Measured, 2 gloo workers, mlp-tiny at 4096 rows, rank 1 throttled 4×: the re-balanced run
(split from the unthrottled per-row time and the known factor) and the run dropping the slowest are
clearly faster than the even one, in one study; the re-balanced one still matches the
single-process reference. (3) `drop_slowest=1`, emulated
(deterministic), rank 1 3× slower: rank 1 is dropped on every step that does not run in full
(warm-up, the first measured step, the re-time steps: `backup.runs_in_full`), and the weights
equal a single-process SGD whose dropping steps see only rank 0's rows (losses and final weights at
torch's fp32 tolerances); without the `B/B_kept` rescale that fails (the test of the test); the
step time falls back from the straggler's to about the unthrottled one.
"""
import pytest
import torch

import mgpukit
from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import load_profile
from mgpukit.experiment import load_weights
from mgpukit.prepare import prepare
from mgpukit.lessons import stragglers, warm_parent
from mgpukit.training import backup, hetero
from mgpukit.training.building import Batches, build_model, build_optimizer, loss_fn

warm_parent()
SLOW = {"straggler": {"rank": 1, "factor": 3}}


def test_split_by_speed():
    assert hetero.split_by_speed(8, [1.0, 3.0]) == (6, 2)
    assert hetero.split_by_speed(4096, [1.0, 1.0], unit=64) == (2048, 2048)
    with pytest.raises(ValueError, match="whole units"):
        hetero.split_by_speed(100, [1.0, 1.0], unit=64)


def test_rebalanced_straggler_recovers_measured():
    rows = stragglers.measured_stragglers(factor=4, global_batch=4096, steps=8, split_from="factor")
    _, even_slow, balanced, dropped = rows
    assert balanced["rows"][1] < balanced["rows"][0]  # the throttled rank gets fewer rows
    fast, slow = even_slow["rank_compute_s"]
    assert slow > 2 * fast, rows  # the throttle bites (within one run: other load hits both ranks)
    assert balanced["measured_s"] < 0.8 * even_slow["measured_s"], rows
    assert balanced["parity_ok"] is True
    assert dropped["measured_s"] < 0.8 * even_slow["measured_s"], rows  # drop_slowest, measured


def _drop_run(tmp_path, options, parity=False):
    return mgpukit.run("dp-naive", workers=2, steps=3, global_batch=8, mode="emulated", profile="h100-nvlink",
                       parity=parity, options=options, weights_path=tmp_path / "w.safetensors")


def _kept_rows_reference(steps=3, global_batch=8):
    """Single-process SGD: the full steps (`backup.runs_in_full`) on the whole batch, the others on
    rank 0's half only."""
    cfg = RunConfig(global_batch=global_batch, steps=steps)
    model, batches, loss = build_model(cfg), Batches(cfg), loss_fn(cfg)
    opt = build_optimizer(cfg, model.parameters())
    losses = []
    for step in range(steps):
        x, y = batches(step)
        rows = slice(None) if backup.runs_in_full(step) else slice(0, global_batch // 2)
        value = loss(model(x[rows]), y[rows])
        opt.zero_grad()
        value.backward()
        opt.step()
        losses.append(value.item())
    return losses, {k: v.detach() for k, v in model.state_dict().items()}


def test_drop_slowest_is_the_kept_rows_gradient(tmp_path):
    rec = _drop_run(tmp_path, {**SLOW, "drop_slowest": 1})
    assert rec["extra"]["0"]["dropped"] == [[], [], [1]]
    losses, weights = _kept_rows_reference()
    torch.testing.assert_close(torch.tensor(rec["losses"]), torch.tensor(losses))
    got = load_weights(tmp_path / "w.safetensors")
    for name, w in weights.items():
        torch.testing.assert_close(got[name], w, msg=name)


def test_drop_slowest_decides_from_measured_times_and_retimes(tmp_path):
    """Warm-up (step 0) is not a measurement, step 1 is every rank's first, and every
    RETIME_EVERY steps a full step re-times the dropped rank (was: dropped from step 1 on the
    warm-up's times, and never re-timed: [[], [1], [1], [1], [1], [1], [1]])."""
    assert [backup.runs_in_full(s) for s in range(10)] == [True, True, False, False, False, True,
                                                           False, False, False, True]
    rec = mgpukit.run("dp-naive", workers=2, steps=7, global_batch=8, mode="emulated", profile="h100-nvlink",
                      parity=False, options={**SLOW, "drop_slowest": 1})
    assert rec["extra"]["0"]["dropped"] == [[], [], [1], [1], [1], [], [1]]


def test_drop_without_the_rescale_is_caught(tmp_path, monkeypatch):
    """Kept ranks averaged with the dropped rank's zeros, no n/(n-k): half the gradient."""
    real = backup.DropSlowest.computes

    def unscaled(self, step):
        out = real(self, step)
        self.scale = 1.0
        return out

    monkeypatch.setattr(backup.DropSlowest, "computes", unscaled)  # forked workers inherit it
    rec = _drop_run(tmp_path, {**SLOW, "drop_slowest": 1})
    _, weights = _kept_rows_reference()
    got = load_weights(tmp_path / "w.safetensors")
    assert any(not torch.allclose(got[k], w) for k, w in weights.items())


def test_drop_slowest_recovers_the_step_emulated(tmp_path):
    plain = _drop_run(tmp_path, {})["step_time_s"][-1]
    slow = _drop_run(tmp_path, SLOW)["step_time_s"][-1]
    rec = _drop_run(tmp_path, {**SLOW, "drop_slowest": 1}, parity=True)
    assert rec["parity"] is None and rec["reference"].startswith("no reference")  # fewer rows than it
    dropped = rec["step_time_s"][-1]
    assert dropped < 0.8 * slow, (plain, slow, dropped)
    assert dropped < 1.25 * plain, (plain, slow, dropped)  # the straggler's optimizer step remains


@pytest.mark.parametrize("strategy, options, match", [
    ("ddp", {"drop_slowest": 1}, "runs with dp-naive"),
    ("dp-naive", {"drop_slowest": 2}, "keep at least one"),
])
def test_drop_slowest_refusals(strategy, options, match):
    with pytest.raises(ValueError, match=match):
        prepare(strategy, workers=2, options=options)


def test_an_emulated_straggler_computes_exactly_factor_times_slower_kernels_only():
    """gpt-tiny's kernels are mostly the GEMMs' fixed latency: a straggler that only divided the
    peak FLOP/s and bandwidth ran 1.84× (forward) and 2.07× (backward), not 3×."""
    profile = load_profile("h100-nvlink").kernels_only()
    rec = mgpukit.run("dp-naive", workers=2, steps=2, global_batch=8, mode="emulated", profile=profile,
                      parity=False, options={"straggler": {"rank": 1, "factor": 3}})
    for kind in ("fwd", "bwd"):
        fast, slow = (sum(e["end"] - e["start"] for e in rec["timeline"]
                          if e["kind"] == kind and e["rank"] == r and e["step"] == 1) for r in (0, 1))
        assert slow == pytest.approx(3 * fast, rel=1e-9), kind


def test_a_step_a_rank_was_dropped_is_not_a_zero_second_step():
    """Under drop_slowest a dropped rank has no compute events that step: its fastest step is the
    fastest it computed (was 0.0 — notebook 10 printed "computed in 0 ms"), None if it never did."""
    from mgpukit.lessons.stragglers import dropped_per_step, per_rank_seconds

    def ev(rank, step, seconds):
        return {"stream": "compute", "kind": "fwd", "rank": rank, "step": step, "start": 0.0, "end": seconds}
    rec = {"world_size": 3, "step_time_s": [1.0, 1.0, 1.0],
           "timeline": [ev(0, 1, 0.5), ev(0, 2, 0.4), ev(1, 1, 0.9), ev(2, 0, 0.3)],
           "extra": {"0": {"dropped": [[], [2], [1, 2]]}}}
    assert per_rank_seconds(rec) == [0.4, 0.9, None]
    assert dropped_per_step(rec) == [[], [2], [1, 2]]
    assert dropped_per_step({"extra": {"0": {}}}) is None
