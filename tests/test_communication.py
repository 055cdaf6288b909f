"""Collectives from send/recv, bus bandwidth, parameter server.

Method: the hand-written all-reduces are compared with `dist.all_reduce` *exactly* on
integer-valued float tensors (every partial sum is an exact integer, so summation order cannot
hide a wrong algorithm behind rounding), on sizes not divisible by the number of ranks; bytes
sent per rank are read from the recorder and compared with the formulas; the virtual clock's
time for a ring is compared with the alpha-beta sum of its steps. The synchronous parameter
server is checked for parity against the single-process reference; the asynchronous one for
its staleness bound.
"""
from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.recorder import Recorder
from mgpukit.runtime.context import current
from mgpukit.runtime.launcher import OversubscribedWarning, WorkerError, launch
from mgpukit.strategies.communication import collectives as C
from mgpukit.strategies.communication.bandwidth import (compare_bandwidth, fit_alpha_beta,
                                                        predicted_busbw)

SIZES = (1, 7, 1001)  # numel; none divisible by 2, 3 or 4 (and 1 < n: empty chunks)


def _launch(fn, n, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        return launch(fn, n, *args, echo=False, timeout_s=120, **kw)


def _exactness_worker(impls):
    ctx = current()
    out = {}
    for impl in impls:
        for numel in SIZES:
            g = torch.Generator().manual_seed(1000 * ctx.rank + numel)
            t = torch.randint(-1000, 1000, (numel,), generator=g).float()
            want = t.clone()
            dist.all_reduce(want)
            C.all_reduce_fn(impl)(Recorder(ctx), t)
            out[(impl, numel)] = bool(torch.equal(t, want))
    # reduce-scatter and all-gather on their own: rank i ends with chunk i of the sum / all chunks
    n, me = ctx.world_size, ctx.rank
    t = torch.arange(11, dtype=torch.float32) * (me + 1)
    full = t.clone()
    dist.all_reduce(full)
    mine = C.ring_reduce_scatter(Recorder(ctx), t)
    out["reduce_scatter"] = bool(torch.equal(mine, C.chunks(full, n)[me]))
    g = torch.zeros(11)
    C.chunks(g, n)[me].copy_(C.chunks(full, n)[me])
    C.ring_all_gather(Recorder(ctx), g)
    out["all_gather"] = bool(torch.equal(g, full))
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_all_reduce_equals_backend_exactly(n):
    impls = ["ring", "naive"] + (["tree"] if n & (n - 1) == 0 else [])
    for rank, checks in enumerate(_launch(_exactness_worker, n, impls)):
        assert all(checks.values()), f"rank {rank} of {n}: {[k for k, ok in checks.items() if not ok]}"


def _group_worker():
    """Two rings at once on a 4-rank world: {0, 2} and {1, 3}; global ranks throughout."""
    ctx = current()
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    group = groups[ctx.rank % 2]
    t = torch.arange(5, dtype=torch.float32) + 10 * ctx.rank
    want = t.clone()
    dist.all_reduce(want, group=group)
    got = {}
    for impl in ("ring", "naive", "tree"):
        x = t.clone()
        C.all_reduce_fn(impl)(Recorder(ctx), x, group)
        got[impl] = bool(torch.equal(x, want))
    return got


def test_collectives_on_a_subgroup():
    for checks in _launch(_group_worker, 4):
        assert all(checks.values()), checks


def test_tree_refuses_non_power_of_two():
    with pytest.raises(WorkerError, match="power-of-two"):
        _launch(lambda: C.tree_all_reduce(Recorder(current()), torch.ones(4)), 3)


def _bytes_worker(impl, numel):
    ctx = current()
    rec = Recorder(ctx)
    C.all_reduce_fn(impl)(rec, torch.ones(numel))
    comm = rec.result()["comm"]
    return {"sent": comm["bytes_sent"], "received": comm["bytes_received"], "vtime": rec.now()}


@pytest.mark.parametrize("impl,n", [("ring", 3), ("ring", 4), ("naive", 3), ("tree", 4)])
def test_bytes_sent_match_formula(impl, n):
    numel = 1200  # divisible by 2, 3, 4: the formulas are exact
    nbytes = 4 * numel
    out = _launch(_bytes_worker, n, impl, numel, mode="cpu")
    for rank, o in enumerate(out):
        if impl == "naive":  # 2(n-1)·B through rank 0: (n-1)·B in, (n-1)·B out
            want = (n - 1) * nbytes if rank == 0 else nbytes
            assert o["received"] == want
        else:
            want = 2 * (n - 1) / n * nbytes
        assert o["sent"] == pytest.approx(want)
        assert o["sent"] == pytest.approx(C.bytes_sent(impl, nbytes, n, rank))


@pytest.mark.parametrize("impl,n", [("ring", 4), ("ring", 3), ("tree", 4), ("backend", 4)])
def test_emulated_time_matches_alpha_beta(impl, n):
    numel = 3 * 2**16  # 768 KiB
    nbytes = 4 * numel
    kernels = load_profile("h100-nvlink").kernels_only()  # alpha-beta alone: no host launches
    link = kernels.intra_node
    out = _launch(_bytes_worker, n, impl, numel, mode="emulated", profile=kernels)
    if impl == "ring":  # the sum of 2(n-1) p2p steps of B/n bytes
        want = 2 * (n - 1) * (link.alpha + nbytes / n / link.beta)
    elif impl == "tree":
        want = 2 * math.log2(n) * link.alpha + 2 * (n - 1) / n * nbytes / link.beta
    else:
        want = 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * nbytes / link.beta
    assert want == pytest.approx(C.predicted_time(impl, nbytes, n, link), rel=1e-12)
    assert max(o["vtime"] for o in out) == pytest.approx(want, rel=1e-9)


# ---------------------------------------------------------------- bandwidth


def test_fit_alpha_beta_recovers_a_line():
    sizes = [2**k for k in range(10, 25, 2)]
    times = [3e-4 + s / 8e8 for s in sizes]
    fit = fit_alpha_beta(sizes, times)
    assert fit["alpha"] == pytest.approx(3e-4, rel=1e-6)
    assert fit["beta"] == pytest.approx(8e8, rel=1e-6)
    assert predicted_busbw(fit, 2**40, 2) == pytest.approx(8e8, rel=1e-3)  # n=2: busbw = algbw
    with pytest.raises(ValueError, match="two"):
        fit_alpha_beta([1], [1.0])


def test_emulated_bandwidth_recovers_the_profile_link():
    res = compare_bandwidth([2**12, 2**16, 2**22], workers=4, impls=("backend", "ring", "tree", "naive"),
                            repeats=1, mode="emulated", profile=load_profile("h100-nvlink").kernels_only(),
                            timeout_s=60)
    link = load_profile("h100-nvlink").intra_node
    for impl in ("backend", "ring"):  # fitted as a ring: alpha per step and beta per link
        assert res[impl]["source"] == "emulated"
        assert res[impl]["link"]["alpha"] == pytest.approx(link.alpha, rel=1e-6)
        assert res[impl]["link"]["beta"] == pytest.approx(link.beta, rel=1e-6)
    # the naive one moves (n-1)·B out of rank 0: less bus bandwidth once bandwidth dominates
    assert res["naive"]["busbw"][-1] < 0.7 * res["ring"]["busbw"][-1]


def test_measured_bandwidth_and_bench_shape():
    from mgpukit.bench.comm import bench_comm

    res = compare_bandwidth([2**10, 2**16], workers=3, impls=("backend", "ring", "tree"), repeats=1,
                            timeout_s=60)
    assert "skipped" in res["tree"] and res["ring"]["source"] == "measured"
    assert all(bw > 0 for bw in res["ring"]["busbw"])
    out = bench_comm(SimpleNamespace(quick=True, repeats=1))
    assert out["ring_over_backend_16MB"] > 0 and {"rows", "ok", "target"} <= set(out)


# ---------------------------------------------------------------- parameter server


def test_ps_sync_parity_and_async_differs():
    from mgpukit.experiment import reference, run
    from mgpukit.parity import FP32_TOL, compare

    sync = run("ps-sync", workers=3, steps=3, global_batch=6, timeout_s=60)
    assert sync["parity"]["ok"], sync["parity"]
    assert sync["parity"]["weights_checked"]
    # server link: (n-1) weight buffers out per step; each worker: one gradient buffer out
    theory = sync["theory"]["comm_bytes_per_rank"]
    for rank, comm in sync["comm"].items():
        assert comm["bytes_sent"] == 3 * theory[rank]
    ring = run("allreduce-ring", workers=3, steps=3, global_batch=6, timeout_s=60)
    assert ring["parity"]["ok"], ring["parity"]
    # the parity check is not vacuous: stale gradients give another trajectory, and it says so
    asy = run("ps-async", workers=3, steps=3, global_batch=6, timeout_s=60)
    assert not compare(asy, None, reference("single", asy_cfg(asy)), FP32_TOL)["ok"]
    staleness = asy["extra"]["0"]["staleness"]
    assert staleness == [min(u, 1) for u in range(6)]  # bound n-2 = 1, round-robin: min(u, s)
    assert all(max(asy["extra"][r]["idle_s"]) > 0 for r in asy["extra"])
    assert any(e["kind"] == "idle" for e in asy["timeline"])


def asy_cfg(record):
    from mgpukit.config import RunConfig

    return RunConfig(**record["config"])


def test_ps_async_staleness_bound_is_respected_emulated():
    from mgpukit.experiment import run

    rec = run("ps-async", workers=4, steps=2, global_batch=12, mode="emulated",
              profile="h100-nvlink", options={"staleness": 1}, timeout_s=60)
    st = rec["extra"]["0"]["staleness"]
    assert len(st) == 2 * 3 and all(0 <= s <= 1 for s in st) and max(st) == 1
    assert rec["extra"]["0"]["staleness_bound"] == 1
    with pytest.raises(ValueError, match="staleness"):
        run("ps-async", workers=3, steps=1, global_batch=6, options={"staleness": 2})
    with pytest.raises(ValueError, match="does not split into 2 data ranks"):
        run("ps-sync", workers=3, steps=1, global_batch=9)  # divides by 3 ranks, not by 2 workers


def test_widget_predictions_and_headless_explorer():
    from mgpukit.plots.alpha_beta import plot_alpha_beta
    from mgpukit.studies.alpha_beta import predict_all_reduce
    from mgpukit.widgets.communication import alpha_beta_explorer

    link = load_profile("h100-nvlink").intra_node
    p = predict_all_reduce(2**24, 8, "ring", "h100-nvlink")
    assert p["time_s"] == pytest.approx(14 * link.alpha + 2 * 7 / 8 * 2**24 / link.beta)
    assert p["busbw"] == pytest.approx(2 * 7 / 8 * 2**24 / p["time_s"])
    assert predict_all_reduce(2**24, 8, "naive")["time_s"] > p["time_s"]
    names = [t.name for t in plot_alpha_beta(2**20, 6, "tree").data]
    assert [n.split(" ")[0] for n in names] == ["ring", "naive", "link"]  # no tree: 6 is no power of 2
    alpha_beta_explorer(n=6, algorithm="tree")  # headless: draws once, explains instead of raising
