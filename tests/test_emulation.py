"""The analytic step time of our GPT (`costmodel.gpt_step`) and `mgpukit bench emulation`.

Method: (1) the closed form's forward and backward times equal what the virtual clock charges
for the real GPT's forward and backward, op by op, in this process — so the closed form counts
every kernel; (2) the bench in quick mode runs DDP (and the pipelines when registered) under
the virtual clock and compares them with the closed form: deterministic, so the agreement is
asserted; the emulated-vs-measured figure is noisy on a shared machine and only checked for
shape.
"""
from types import SimpleNamespace

import pytest

from mgpukit.config import RunConfig
from mgpukit.costmodel.gpt_step import ddp_buckets, gpt_params, one_f_one_b_stalls, stage_ops
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.vclock import VirtualClock
from mgpukit.training.building import Batches, build_model, build_optimizer, loss_fn

H100 = load_profile("h100-nvlink")


@pytest.mark.parametrize("model", ["gpt-tiny", "gpt-small"])
def test_closed_form_charges_what_the_clock_charges_for_the_real_gpt(model):
    cfg = RunConfig(model=model, global_batch=2)
    net, mcfg = build_model(cfg), cfg.model_config()
    optimizer = build_optimizer(cfg, net.parameters())
    x, y = Batches(cfg)(0)
    ops = stage_ops(mcfg, 2, layers=mcfg.n_layer, embed=True, head=True)
    assert ops["params"] == sum(p.numel() for p in net.parameters()) == sum(
        gpt_params(mcfg)[k] * (mcfg.n_layer if k == "layer" else 1) for k in gpt_params(mcfg))
    for _ in range(2):  # the second step: gradients and momentum buffers exist
        clock = VirtualClock(H100, 0)
        with clock.counting():
            loss = loss_fn(cfg)(net(x), y)
        fwd = clock.now()
        with clock.counting():
            loss.backward()
        bwd = clock.now() - fwd
        with clock.counting():
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
    assert fwd == pytest.approx(sum(op.seconds(H100) for op in ops["fwd"]), rel=1e-3)
    assert bwd == pytest.approx(sum(op.seconds(H100) for op in ops["bwd"]), rel=1e-3)
    assert clock.now() - fwd - bwd == pytest.approx(9 * 4 * ops["params"] / H100.memory_bandwidth, rel=1e-9)


def test_ddp_buckets_one_for_gpt_tiny_first_small_bucket_for_gpt_small():
    tiny = RunConfig(model="gpt-tiny").model_config()
    small = RunConfig(model="gpt-small").model_config()
    assert ddp_buckets(tiny) == [4.0 * stage_ops(tiny, 1, layers=tiny.n_layer, embed=True, head=True)["params"]]
    first, *rest = ddp_buckets(small)
    assert 2**20 <= first < 2 * 2**20 and len(rest) == 1


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_1f1b_stall_count_matches_the_schedule_simulator_for_equal_stages(p):
    from mgpukit.costmodel.schedules import build_schedule
    from mgpukit.costmodel.simulate import simulate

    f, b, h = 3.0, 7.0, 0.25  # compute-bound: h < f
    for m in range(p, 4 * p + 1):
        makespan = simulate(build_schedule("1f1b", p, m), cost_f=f, cost_b=b, cost_p2p=h).makespan
        closed = (m + p - 1) * (f + b) + 2 * (p - 1) * h + 2 * h * one_f_one_b_stalls(p, m)
        assert makespan == pytest.approx(closed, rel=1e-12), (p, m)


def test_bench_quick_analytic_agrees_with_emulated(tmp_path):
    from mgpukit.bench.emulation import bench_emulation

    out = bench_emulation(SimpleNamespace(quick=True, this_machine=tmp_path / "this-machine.toml"))
    rows = {(r["strategy"], r["workers"]): r for r in out["analytic_vs_emulated"]}
    assert rows[("ddp", 2)]["ratio"] == pytest.approx(1.0, abs=0.05)
    assert rows[("ddp", 2)]["within_5pct"] and out["all_within_5pct"]
    vs = out["emulated_vs_measured"]
    assert vs["measured_s"] > 0 and vs["emulated_s"] > 0 and vs["calibrated_now"]
    assert set(vs) >= {"measured_s", "emulated_s", "error", "within_25pct", "profile"}
