"""Data-parallel strategies: numerical parity against a single-process reference built from
the same weights and the same global batches (losses, gradient norms and final weights at
torch's fp32 tolerances), plus the timeline properties each strategy exists to show.

Runs are tiny (gpt-tiny, 2 workers, 3 steps); emulated runs give deterministic timelines.
"""
import pytest
import torch

from mgpukit.experiment import run
from mgpukit.strategies.data_parallel import naive
from mgpukit.strategies.data_parallel.bucketed import build_buckets
from mgpukit.training.lr_scaling import lr_schedule
from mgpukit.studies.warm import warm_parent
from mgpukit.config import RunConfig
from mgpukit.training.building import build_model

warm_parent()  # forked workers then skip re-importing torch._dynamo / accelerate
SMALL_BUCKETS = {"bucket_mb": 0.05}  # ~13 buckets for gpt-tiny's 0.85 MB of gradients


def _events(record, rank, step, kind=None, stream=None):
    return [e for e in record["timeline"] if e["rank"] == rank and e["step"] == step
            and (kind is None or e["kind"] == kind) and (stream is None or e["stream"] == stream)]


def _busy(record, rank, step, kinds=("fwd", "bwd")):
    return sum(e["end"] - e["start"] for e in _events(record, rank, step) if e["kind"] in kinds)


@pytest.fixture(scope="module")
def bucketed():
    return run("dp-bucketed", workers=2, steps=3, mode="cpu", options=SMALL_BUCKETS)


def test_dp_naive_parity():
    rec = run("dp-naive", workers=2, steps=3, mode="cpu")
    assert rec["parity"]["ok"], rec["parity"]
    n_params = len(list(build_model(RunConfig()).parameters()))
    assert rec["comm"]["0"]["collectives"]["all_reduce"] == 3 * n_params  # one per gradient per step


def test_dp_bucketed_parity_with_several_buckets(bucketed):
    assert bucketed["parity"]["ok"], bucketed["parity"]
    buckets = bucketed["extra"]["0"]["buckets"]
    assert len(buckets) >= 5
    assert bucketed["comm"]["0"]["collectives"]["all_reduce"] == 3 * len(buckets)


def test_bucketed_all_reduce_overlaps_backward(bucketed):
    """Buckets launch from gradient hooks, so their all-reduces start before backward ends."""
    for step in (1, 2):
        bwd = _events(bucketed, 0, step, "bwd")[0]
        comm = _events(bucketed, 0, step, stream="comm")
        assert sum(e["start"] < bwd["end"] for e in comm) >= 2
    # the emulated (virtual-clock) timeline shows the same overlap, deterministically
    emu = run("dp-bucketed", workers=2, steps=2, mode="emulated", profile="h100-nvlink",
              parity=False, options=SMALL_BUCKETS)
    bwd = _events(emu, 0, 1, "bwd")[0]
    assert any(bwd["start"] < e["start"] < bwd["end"] for e in _events(emu, 0, 1, stream="comm"))


@pytest.mark.parametrize("strategy,options", [("dp-naive", {}), ("dp-bucketed", SMALL_BUCKETS), ("ddp", {})])
def test_gradient_accumulation_matches_the_large_batch_step(strategy, options):
    """k=2 micro-steps per optimizer step equal the single-process step on the whole batch,
    and communicate only once per step (as many all-reduces as without accumulation)."""
    rec = run(strategy, workers=2, steps=3, mode="cpu", micro_batches=2, options=options)
    assert rec["parity"]["ok"], rec["parity"]
    fwd = [e for e in rec["timeline"] if e["rank"] == 0 and e["step"] == 1 and e["kind"] == "fwd"]
    assert sorted(e["microbatch"] for e in fwd) == [0, 1]
    per_step = rec["comm"]["0"]["collectives"]["all_reduce"] / 3
    if strategy == "dp-naive":
        assert per_step == len(list(build_model(RunConfig()).parameters()))
    elif strategy == "dp-bucketed":
        assert per_step == len(rec["extra"]["0"]["buckets"])
    elif strategy == "ddp":
        assert per_step == 1  # gpt-tiny fits DDP's one 25 MB bucket


def test_forgetting_to_divide_by_world_size_is_caught(monkeypatch):
    """The parity check must fail for a plausible bug: gradients summed, not averaged."""
    def sum_only(rec, params, *, group=None):
        for p in params:
            rec.all_reduce(p.grad, group=group)

    monkeypatch.setattr(naive, "all_reduce_gradients", sum_only)  # forked workers inherit it
    rec = run("dp-naive", workers=2, steps=3, mode="cpu")
    assert rec["parity"]["ok"] is False
    assert rec["parity"]["grad_norms_max_abs_diff"] > 0.1


def test_straggler_leaves_the_others_idle_emulated():
    """Rank 1 three times slower: rank 0 idles 2x its own compute before the all-reduce."""
    rec = run("dp-naive", workers=2, steps=2, mode="emulated", profile="h100-nvlink",
              options={"straggler": {"rank": 1, "factor": 3}})
    assert rec["parity"]["ok"]
    fast, slow = _busy(rec, 0, 1), _busy(rec, 1, 1)
    assert slow == pytest.approx(3 * fast, rel=1e-6)
    (idle,) = _events(rec, 0, 1, "idle")  # from rank 0's end of backward to rank 1's
    assert idle["start"] == _events(rec, 0, 1, "bwd")[0]["end"]
    assert idle["end"] == pytest.approx(_events(rec, 1, 1, "bwd")[0]["end"])
    assert idle["end"] - idle["start"] >= 2 * fast * 0.99
    assert not _events(rec, 1, 1, "idle")
    first_comm = min(e["start"] for e in _events(rec, 0, 1, stream="comm"))
    assert first_comm >= idle["end"] - 1e-12  # it waits, then all-reduces


def test_straggler_measured_shows_idle():
    """Measured: rank 1 sleeps 3x the time of each of its ops; rank 0 idles before the
    all-reduce for about 3x its own compute (asserted loosely: CI machines are shared)."""
    rec = run("dp-bucketed", workers=2, steps=4, mode="cpu", parity=False,
              options={"straggler": {"rank": 1, "factor": 4}})
    idle = sum(e["end"] - e["start"] for s in (1, 2, 3) for e in _events(rec, 0, s, "idle"))
    busy = sum(_busy(rec, 0, s) for s in (1, 2, 3))
    assert idle > 0.5 * busy, (idle, busy)  # ~3x on a quiet machine, ~1.4x seen under load


def test_slow_loader_and_prefetch_emulated():
    """A 20 us loader: on the critical path it adds 20 us to every step (the host waits for
    the batch before it can launch anything); with a prefetch thread it hides behind the step."""
    common = dict(workers=2, steps=4, mode="emulated", profile="h100-nvlink", parity=False)
    plain = run("dp-bucketed", **common)
    slow = run("dp-bucketed", **common, options={"loader_delay_s": 20e-6})
    fixed = run("dp-bucketed", **common, options={"loader_delay_s": 20e-6, "prefetch": 2})
    data = [sum(e["end"] - e["start"] for e in _events(r, 0, 2, "data")) for r in (plain, slow)]
    assert data[1] - data[0] == pytest.approx(20e-6, rel=1e-3)  # plain: the batch's own copies
    t_plain, t_slow, t_fixed = (r["step_time_s"][2] for r in (plain, slow, fixed))
    assert t_slow == pytest.approx(t_plain + 20e-6, rel=1e-3)
    assert t_fixed == pytest.approx(t_plain, rel=1e-3)


def test_prefetch_thread_keeps_batches_in_order():
    """Measured mode loads on a background thread: same batches, same order (parity holds)."""
    rec = run("dp-bucketed", workers=2, steps=3, mode="cpu",
              options={"loader_delay_s": 0.005, "prefetch": 2})
    assert rec["parity"]["ok"], rec["parity"]


def test_linear_lr_scaling_with_warmup():
    cfg = RunConfig(global_batch=32, lr=0.1, options={"lr_scaling": "linear", "warmup_steps": 4})
    lr = lr_schedule(cfg, world_size=4)  # 8 per worker -> k = 4
    assert [lr(s) for s in range(6)] == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4])
    assert lr_schedule(cfg.replace(options={}), 4) is None
    tuned_at_16 = cfg.replace(options={"lr_scaling": "linear", "base_batch": 16})
    assert lr_schedule(tuned_at_16, 4)(0) == pytest.approx(0.2)  # k = 32 / 16


def test_buckets_follow_backward_order_and_cap():
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (100, 200, 300, 400)]  # 4 B each
    buckets = build_buckets(params, bucket_bytes=2000)  # closed once >= 2000 B, as DDP does
    assert [[p.numel() for p in b] for b in buckets] == [[400, 300], [200, 100]]


def test_scaling_explorer_draws_headless():
    from mgpukit.widgets.data_parallel import scaling_explorer

    box = scaling_explorer(model="gpt-tiny", profile="h100-nvlink", max_workers=8, show=False)
    assert box is not None


def test_a_weak_series_takes_the_strong_run_of_its_own_configuration_and_refuses_another():
    """Strong scaling's 2-worker run at batch 16 *is* weak scaling's at 8 per worker (notebook
    01 runs it once); a run of any other batch is refused in one sentence, never plotted."""
    from mgpukit.lessons import data_parallel as studies

    kw = dict(steps=1, mode="emulated", profile="h100-nvlink")
    strong = studies.scaling_records((1, 2), scaling="strong", batch=16, **kw)
    weak = studies.scaling_records((1, 2), scaling="weak", batch=8, reuse={2: strong[1]}, **kw)
    assert weak[1]["step_time_s"] == strong[1]["step_time_s"] and weak[1] is not strong[1]
    assert weak[0]["config"]["global_batch"] == 8
    with pytest.raises(ValueError, match="another run"):
        studies.scaling_records((1, 2), scaling="weak", batch=4, reuse={2: strong[1]}, **kw)


def test_the_lr_study_shares_one_launch_and_keeps_each_runs_losses():
    """Notebook 01's lr study runs its three k-worker variants in one launch (`run_each`); each
    keeps the losses a launch of its own gives, and its legend label."""
    from mgpukit.lessons import data_parallel as studies

    kw = dict(mode="cpu", model="mlp-tiny", steps=3, lr=0.05, parity=False)
    runs = studies.lr_scaling_study(workers=2, per_worker_batch=8, lr=0.05, steps=3, warmup_steps=2)
    alone = run("dp-bucketed", workers=2, global_batch=16, options={"lr_scaling": "linear", "base_batch": 8}, **kw)
    assert [r["strategy"] for r in runs] == ["lr 0.05", "lr 0.05 (not scaled)", "lr 0.1 (linear rule)",
                                             "lr 0.1 (linear rule, 2 warmup steps)"]
    assert [r["world_size"] for r in runs] == [1, 2, 2, 2]
    assert runs[2]["losses"] == alone["losses"]
    assert runs[1]["losses"] != runs[2]["losses"] != runs[3]["losses"]
