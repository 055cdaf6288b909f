"""The analytic step time of our GPT (`costmodel.gpt_step`) and `mgpukit bench emulation`.

Method: (1) the closed form's forward and backward times equal what the virtual clock charges
for the real GPT's forward and backward, op by op, in this process — so the closed form counts
every kernel; (2) the bench in quick mode runs DDP (and the pipelines when registered) under
the virtual clock and compares them with the closed form: deterministic, so the agreement is
asserted; the emulated-vs-measured figure is noisy on a shared machine and only checked for
shape.
"""
import dataclasses
from types import SimpleNamespace

import pytest

from mgpukit.config import RunConfig
from mgpukit.costmodel.gpt_ops import gpt_params, kernel_seconds, sgd_ops, sgd_seconds, stage_ops
from mgpukit.costmodel.gpt_step import ddp_buckets, one_f_one_b_stalls
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.vclock import VirtualClock
from mgpukit.training.building import Batches, build_model, build_optimizer, loss_fn

H100 = load_profile("h100-nvlink").kernels_only()  # the closed form counts kernels only


def _gpt_ops(model):
    """The model's config and the closed form's kernels for a batch of 2 sequences."""
    mcfg = RunConfig(model=model).model_config()
    return mcfg, stage_ops(mcfg, 2, layers=mcfg.n_layer, embed=True, head=True)


def _clocked_step(model, profile, foreach=False):
    """Forward, backward and optimizer seconds of the real GPT's second training step (gradients
    and momentum buffers exist by then) on a virtual clock of `profile`; the optimizer built as
    the kit builds it for an emulated GPU (`foreach`) or for CPU workers (the per-tensor loop)."""
    cfg = RunConfig(model=model, global_batch=2)
    net = build_model(cfg)
    optimizer = build_optimizer(cfg, net.parameters(), SimpleNamespace(emulates_gpu=foreach))
    x, y = Batches(cfg)(0)
    for _ in range(2):
        clock = VirtualClock(profile, 0)
        with clock.counting():
            loss = loss_fn(cfg)(net(x), y)
        fwd = clock.now()
        with clock.counting():
            loss.backward()
        bwd = clock.now() - fwd
        with clock.counting():
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
    return fwd, bwd, clock.now() - fwd - bwd


@pytest.mark.parametrize("model", ["gpt-tiny", "gpt-small"])
def test_closed_form_charges_what_the_clock_charges_for_the_real_gpt(model):
    mcfg, ops = _gpt_ops(model)
    assert ops["params"] == sum(p.numel() for p in build_model(RunConfig(model=model)).parameters()) == sum(
        gpt_params(mcfg)[k] * (mcfg.n_layer if k == "layer" else 1) for k in gpt_params(mcfg))
    fwd, bwd, opt = _clocked_step(model, H100)
    assert fwd == pytest.approx(sum(op.seconds(H100) for op in ops["fwd"]), rel=1e-3)
    assert bwd == pytest.approx(sum(op.seconds(H100) for op in ops["bwd"]), rel=1e-3)
    assert opt == pytest.approx(9 * 4 * ops["params"] / H100.memory_bandwidth, rel=1e-9)


# h100-nvlink's minimum kernel time (2 µs) without host dispatch: the stream never waits for
# the host, so its time is the kernels', each at least the minimum
MIN_KERNEL = dataclasses.replace(load_profile("h100-nvlink"), op_overhead=0.0, op_overhead_by_context=None,
                                 collective_launch=0.0)


@pytest.mark.parametrize("model", ["gpt-tiny", "gpt-small"])
@pytest.mark.parametrize("foreach", [False, True])
def test_closed_form_lists_the_clock_kernels_one_by_one(model, foreach):
    """With a minimum kernel time every kernel costs at least 2 µs, so a lump (all parameters'
    accumulation as one op) would be short by hundreds of kernels: forward (with the copy that
    makes the strided target slice contiguous for the loss), backward and the optimizer (four
    kernels per parameter tensor in the per-tensor loop, four in all with foreach) agree exactly."""
    _, ops = _gpt_ops(model)
    assert MIN_KERNEL.min_kernel_time > 0
    fwd, bwd, opt = _clocked_step(model, MIN_KERNEL, foreach)
    assert fwd == pytest.approx(sum(op.seconds(MIN_KERNEL) for op in ops["fwd"]), rel=1e-9)
    assert bwd == pytest.approx(sum(op.seconds(MIN_KERNEL) for op in ops["bwd"]), rel=1e-9)
    sgd = sgd_ops(ops["tensors"], foreach=foreach)
    assert len(sgd) == 4 * (1 if foreach else len(ops["tensors"]))
    assert opt == pytest.approx(kernel_seconds(sgd, MIN_KERNEL), rel=1e-9)
    if not foreach:
        assert opt > 4 * len(ops["tensors"]) * MIN_KERNEL.min_kernel_time * 0.99


def test_an_emulated_gpu_steps_its_optimizer_as_a_gpu_does():
    """The emulated ranks hold CPU tensors, for which torch picks the per-parameter loop; a GPU
    runs `foreach`, so the kit builds that for an emulated GPU (`ctx.emulates_gpu`). On
    h100-nvlink gpt-tiny's SGD step is then 4 launches, not 4 per tensor (276: 2.8 ms of host)."""
    prof = load_profile("h100-nvlink")
    _, ops = _gpt_ops("gpt-tiny")
    _, _, loop = _clocked_step("gpt-tiny", prof, foreach=False)
    _, _, gpu = _clocked_step("gpt-tiny", prof, foreach=True)
    assert loop > 2e-3 and gpu < 0.1e-3
    assert gpu == pytest.approx(4 * prof.dispatch_overhead("no_grad") + kernel_seconds(
        sgd_ops(ops["tensors"], foreach=True)[-1:], prof), rel=0.05)
    assert sgd_seconds(ops["tensors"], prof) == pytest.approx(kernel_seconds(sgd_ops(ops["tensors"], foreach=True), prof))


@pytest.mark.parametrize("profile", ["h200", "this-machine-default"])
def test_closed_form_charges_the_host_as_the_clock_does(profile):
    """One convention (issue 24): on a GPU profile the closed form issues its ops from a host
    that pays each op's dispatch (by context, `model_code_factor` included) and lets the device
    start a kernel once it is issued and the stream is free (`gpt_ops.Stream`); on a CPU profile
    the two add. Its whole step equals the clock's for the real GPT's step, host included —
    launch-bound gpt-tiny and the kernel-bound part of gpt-small alike."""
    from mgpukit.costmodel.gpt_ops import Stream, sgd_ops

    prof = load_profile(profile)
    for model in ("gpt-tiny", "gpt-small"):
        _, ops = _gpt_ops(model)
        cfg = RunConfig(model=model, global_batch=2)
        net = build_model(cfg)
        optimizer = build_optimizer(cfg, net.parameters(), SimpleNamespace(emulates_gpu=prof.async_launch))
        x, y = Batches(cfg)(0)
        for _ in range(2):  # the second step: gradients and momentum buffers exist
            clock = VirtualClock(prof, 0)
            with clock.counting():
                loss_fn(cfg)(net(x), y).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
            clock.sync()
        stream = Stream(prof)
        stream.run(ops["fwd"] + ops["bwd"] + sgd_ops(ops["tensors"], foreach=prof.async_launch))
        assert clock.now() == pytest.approx(stream.sync(), rel=1e-9), model
        if prof.async_launch:
            assert clock.split["host"] > 0.5 * clock.now()  # the host is no rounding error here


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
    lb = out["launch_bound"]  # gpt-tiny on one H100 with the host's launches: milliseconds
    # kernels alone: under a quarter of the step (0.23 since the kit's step stopped issuing a
    # zero_ and an add_ per gradient tensor, round 5; 0.2 before)
    assert 1e-3 < lb["step_s"] < 50e-3 and lb["kernels_only_step_s"] < 0.25 * lb["step_s"]
    assert lb["launch_bound"] > 0.9
    assert lb["kernel_s"] + lb["launch_wait_s"] + lb["wait_s"] == pytest.approx(lb["step_s"], rel=1e-9)
    vs = out["emulated_vs_measured"]
    assert vs["measured_s"] > 0 and vs["emulated_s"] > 0 and vs["calibrated_now"]
    assert set(vs) >= {"measured_s", "emulated_s", "error", "within_25pct", "profile"}


# ------------------------------------------- where the time went, and why a pipeline idles

def _pp(profile, steps=2):
    from mgpukit.experiment import run

    return run("pp-gpipe", workers=4, steps=steps, mode="emulated", profile=profile, parity=False)


def test_pipeline_idle_split_adds_up_to_the_bubble_and_says_why():
    """GPipe, 4 stages, 8 micro-batches of gpt-tiny. Kernels only, the stages take tens of µs
    (a GEMM costs at least its 8.5 µs latency): over NVLink (~2 µs a message) the bubble is the
    schedule's; over a link of 200 µs a message it is mostly p2p. With the host's launches the
    stages take milliseconds, the messages vanish, and the stages' uneven op counts (embedding,
    head, loss) show as imbalance. Either way the three parts add up to the bubble."""
    from mgpukit.costmodel.hardware import Link

    slow = dataclasses.replace(H100, intra_node=Link(alpha=200e-6, beta=H100.intra_node.beta))
    for profile, largest in ((H100, "schedule"), (slow, "p2p"), ("h100-nvlink", "imbalance")):
        record = _pp(profile)
        split = record["idle_split"]
        parts = split["schedule"] + split["imbalance"] + split["p2p"]
        assert parts == pytest.approx(split["bubble_fraction"], abs=1e-12)
        assert split["bubble_fraction"] == pytest.approx(record["bubble_fraction"], rel=1e-9)
        assert max(("schedule", "imbalance", "p2p"), key=lambda k: split[k]) == largest, split
        assert split["schedule"] > 0 and split["imbalance"] >= 0


def test_a_pipelines_receive_is_drawn_as_its_wire_time_after_a_wait():
    """GPipe on 4 emulated H100s, kernels only: a stage's receive spans the upstream stage's
    compute and the message. The record keeps the span (the idle split reads it) and the
    message's own link time (``wire_s``); the timeline draws the wire time as "recv" and the
    rest as a wait, so the communication rows are mostly idle, as the bubble says (teacher3:
    solid recv bars under a "0 % p2p" subtitle)."""
    from mgpukit.plots import plot_timeline

    record = _pp(H100)
    recvs = [e for e in record["timeline"] if e["kind"] == "recv"]
    assert recvs and all(0 < e["wire_s"] <= 1e-5 for e in recvs)  # an activation over NVLink: µs
    assert sum(e["end"] - e["start"] for e in recvs) > 3 * sum(e["wire_s"] for e in recvs)  # mostly waiting
    fig = plot_timeline(record, step=1)
    drawn = {t.name: sum(t.x) for t in fig.data}
    mult = next(t.x[0] / (e["end"] - e["start"]) for t in fig.data if t.name == "fwd"
                for e in [min((e for e in record["timeline"] if e["kind"] == "fwd" and e["step"] == 1),
                              key=lambda e: e["start"])])
    # a receive asked for after its message left shows only the part still on the wire
    wire = sum(min(e["wire_s"], e["end"] - e["start"]) for e in recvs if e["step"] == 1)
    assert drawn["recv"] == pytest.approx(wire * mult, rel=1e-6)
    assert drawn["wait"] > drawn["recv"]


def test_ddp_wait_inside_backward_is_drawn_as_waiting_and_the_step_adds_up():
    """DDP on 2 emulated H100s: the bucket's all-reduce ends after backward's last kernel, and
    the reducer's copy-out waits for it inside backward — a "wait" event, not "bwd". Every
    step's device time is kernels + waiting for the host + waiting for communication."""
    from mgpukit.experiment import run

    record = run("ddp", workers=2, steps=2, mode="emulated", profile="h100-nvlink", parity=False)
    ev = [e for e in record["timeline"] if e["rank"] == 0 and e["step"] == 1]
    waits = [e for e in ev if e["kind"] == "wait"]
    ar = [e for e in ev if e["kind"] == "all_reduce"]
    assert len(waits) == 1 and ar and waits[0]["end"] == ar[-1]["end"]
    bwd = [e for e in ev if e["kind"] == "bwd" and e["stream"] == "compute"]
    assert all(e["end"] <= waits[0]["start"] or e["start"] >= waits[0]["end"] for e in bwd)
    assert {e["stream"] for e in ev} == {"host", "compute", "comm"}
    for s in record["extra"]["0"]["time_split"]:
        assert s["kernel_s"] + s["launch_wait_s"] + s["wait_s"] == pytest.approx(s["step_s"], rel=1e-9)
        assert s["host_s"] / s["step_s"] > 0.9  # launch-bound


def test_cpu_profile_draws_no_host_row_and_keeps_the_additive_split():
    from mgpukit.experiment import run

    record = run("ddp", workers=2, steps=2, mode="emulated", profile="this-machine-default", parity=False)
    assert "host" not in {e["stream"] for e in record["timeline"]}
    for s in record["extra"]["0"]["time_split"]:
        assert s["launch_wait_s"] == 0.0
        assert s["kernel_s"] + s["host_s"] + s["wait_s"] == pytest.approx(s["step_s"], rel=1e-9)


def test_idle_split_of_uneven_stages_leaves_no_negative_p2p():
    """GPipe, p = 2, m = 1, free messages, stage 1 three times stage 0 (as a GPT's last stage
    with its LM head): F = 1, 3 and B = 2, 6 back to back. Idle 2·12 - 12 = 12 = imbalance 6
    (rank 0 lacks 6 of rank 1's 9 busy) + fill and drain p·(Σ b - max b)/m = 2·3 = 6; nothing
    is p2p. Charging the fill at the slowest stage's pace would claim 18, more than the idle."""
    from mgpukit.measure.idle import idle_split

    ev = lambda rank, kind, start, end: {"rank": rank, "stream": "compute", "kind": kind,
                                         "start": start, "end": end, "step": 0}
    record = {"theory": {"schedule": "gpipe", "p": 2, "m": 1}, "dims": {"pp": 2},
              "timeline": [ev(0, "fwd", 0, 1), ev(1, "fwd", 1, 4), ev(1, "bwd", 4, 10), ev(0, "bwd", 10, 12)]}
    s = idle_split(record)
    assert s["seconds"]["idle"] == 12 and s["seconds"]["imbalance"] == 6
    assert s["seconds"]["schedule"] == pytest.approx(6) and s["seconds"]["p2p"] == pytest.approx(0, abs=1e-12)


def test_idle_split_gives_the_schedule_what_the_imbalance_leaves_when_its_estimate_overshoots():
    """Equal stages (F = 1, B = 2), p = 2, m = 1, whose fill went faster than a line of identical
    jobs (rank 1 starts half a unit early): idle 2·5.5 − 6 = 5, no imbalance, the estimate
    p·max b·β/(1 − β) = 6 is more than the idle. Schedule 5, p2p 0 — not 6 and −1."""
    from mgpukit.measure.idle import idle_split

    ev = lambda rank, kind, start, end: {"rank": rank, "stream": "compute", "kind": kind,
                                         "start": start, "end": end, "step": 0}
    record = {"theory": {"schedule": "gpipe", "p": 2, "m": 1}, "dims": {"pp": 2},
              "timeline": [ev(0, "fwd", 0, 1), ev(1, "fwd", 0.5, 1.5), ev(1, "bwd", 1.5, 3.5), ev(0, "bwd", 3.5, 5.5)]}
    s = idle_split(record)
    assert s["seconds"]["idle"] == pytest.approx(5) and s["seconds"]["imbalance"] == 0
    assert s["seconds"]["schedule"] == pytest.approx(5) and s["seconds"]["p2p"] == 0
