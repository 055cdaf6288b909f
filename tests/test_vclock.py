"""The virtual clock of emulated mode, checked against hand-computed times.

Method: real launches of CPU workers over gloo with `mode="emulated"`; inside, a `Recorder` on
the worker's context runs real compute and real collectives, and its clock must read exactly
what the roofline (`flops / (peak · efficiency)`, `bytes / bandwidth`) and alpha-beta formulas
(`alpha + B/beta`, ring all-reduce `2(n-1)/n · B/beta + 2(n-1)·alpha`) say, computed here by hand
from the profile's figures. Exact float equality is intended: the clock adds the same terms.
"""
import dataclasses
import multiprocessing
import warnings

import pytest
import torch

import mgpukit
from mgpukit import experiment
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.recorder import Recorder
from mgpukit.measure.vclock import VirtualClock
from mgpukit.runtime.launcher import OversubscribedWarning

PROFILE = "h100-nvlink"
# the hand-computed times below are kernels and messages only; the host's launches are
# checked on their own (test_launch_*), with the shipped profile
# (GEMMs by shape and fused attention are timed by `costmodel.kernels`, tested in
# test_kernels_by_shape.py; here every matmul takes the flat roofline, so the [gemm] and
# [attention] tables are taken off)
H100 = dataclasses.replace(load_profile(PROFILE).kernels_only(), gemm=None, attention=None)
RATE = H100.flops("fp32") * H100.compute_efficiency  # fp32 FLOP/s the clock charges
LINK = H100.intra_node  # every rank of these tests sits in one 8-GPU node


def matmul_seconds(n: int) -> float:
    """An n×n by n×n fp32 matmul: 2n³ FLOPs; compute-bound on an H100 for n ≥ 64."""
    return 2 * n**3 / RATE


def allreduce_seconds(nbytes: int, n: int) -> float:
    return 2 * (n - 1) / n * nbytes / LINK.beta + 2 * (n - 1) * LINK.alpha


# --------------------------------------------------------------------------- roofline (f)

def test_roofline_matmul_is_flops_over_rate_elementwise_is_bytes_over_bandwidth_views_free():
    clock = VirtualClock(H100, 0)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    with clock.counting():
        a @ b
    assert clock.now() == 2 * 512**3 / (H100.flops("fp32") * H100.compute_efficiency)
    assert 3 * 512 * 512 * 4 / H100.memory_bandwidth < clock.now()  # really compute-bound

    clock = VirtualClock(H100, 0)
    x, y = torch.randn(2**20), torch.randn(2**20)
    with clock.counting():
        x + y  # reads two, writes one
    assert clock.now() == 3 * 2**20 * 4 / H100.memory_bandwidth

    clock = VirtualClock(H100, 0)
    with clock.counting():
        a.view(-1), a.t(), a.transpose(0, 1), a[:, :3], a.reshape(256, 1024), a.unsqueeze(0)
    assert clock.now() == 0.0 and clock.bytes_moved == 0.0


def test_copy_does_not_read_its_destination_and_attention_flops_are_counted():
    clock = VirtualClock(H100, 0)
    dst, src = torch.empty(2**20), torch.randn(2**20)
    with clock.counting():
        dst.copy_(src)
    assert clock.bytes_moved == 2 * 2**20 * 4

    clock = VirtualClock(H100, 0)
    q = torch.randn(2, 4, 64, 16)  # (B, nh, T, hs)
    with clock.counting():
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert clock.flops == 4 * 2 * 4 * 64 * 64 * 16  # QKᵀ and AV, causal not halved


def test_op_overhead_is_added_to_every_op_that_is_not_a_view():
    profile = load_profile(PROFILE).kernels_only()  # a CPU worker's semantics: added to each op
    object.__setattr__(profile, "op_overhead", 1e-6)
    clock = VirtualClock(profile, 0)
    x = torch.randn(1024)
    with clock.counting():
        y = x + x
        y.view(32, 32)
    assert clock.now() == 3 * 1024 * 4 / profile.memory_bandwidth + 1e-6


def test_op_overhead_by_context_charges_forward_backward_and_updates_apart():
    """A forward op (autograd records it), a backward op (the engine runs it) and an update
    under no_grad each pay their own context's overhead."""
    import dataclasses

    from mgpukit.measure.op_cost import op_context

    overhead = {"forward": 3e-3, "backward": 2e-3, "no_grad": 1e-3}
    profile = dataclasses.replace(H100, op_overhead=0.5, op_overhead_by_context=overhead)
    seen = []

    class Spy(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((str(func._overloadpacket), op_context(args, kwargs)))
            return func(*args, **(kwargs or {}))

    w = torch.randn(8, requires_grad=True)
    with Spy():
        (w * 2).sum().backward()
        with torch.no_grad():
            w.add_(w.grad)
    assert ("aten.mul", "forward") in seen and ("aten.mul", "backward") in seen
    assert seen[-1] == ("aten.add_", "no_grad")

    clock = VirtualClock(profile, 0)
    x = torch.randn(4)
    with clock.counting(), torch.no_grad():
        x.add_(1.0)
    assert clock.now() == pytest.approx(2 * 4 * 4 / profile.memory_bandwidth + 1e-3)


# ------------------------------------------------------- the host that launches (GPU profiles)

GPU = dataclasses.replace(load_profile(PROFILE), gemm=None, attention=None)  # as shipped but the flat roofline: eager PyTorch's dispatch, asynchronous launches


def _dispatch(context: str) -> float:
    return GPU.dispatch_overhead(context)


def test_launch_tiny_kernels_make_the_step_n_ops_times_the_dispatch():
    """100 tiny no-grad ops: each kernel (min_kernel_time) is shorter than its launch, so the
    device waits for the host and the time is the host's: n · dispatch + the last kernel."""
    clock = VirtualClock(GPU, 0)
    x = torch.randn(16)
    with clock.counting(), torch.no_grad():
        for _ in range(100):
            x.add_(1.0)
    assert GPU.async_launch and GPU.min_kernel_time < _dispatch("no_grad")
    assert clock.now() == pytest.approx(100 * _dispatch("no_grad") + GPU.min_kernel_time, rel=1e-12)
    assert clock.host == pytest.approx(100 * _dispatch("no_grad"), rel=1e-12)
    s = clock.split
    assert s["kernel"] == pytest.approx(100 * GPU.min_kernel_time)
    assert s["kernel"] + s["launch_wait"] + s["wait"] == pytest.approx(clock.now(), rel=1e-12)


def test_launch_a_long_kernel_lets_the_host_run_ahead():
    """A big matmul lasts longer than the launches after it: the host issues the next ops while
    it runs, and they queue on the stream behind it (no launch cost left on the step)."""
    clock = VirtualClock(GPU, 0)
    a = torch.randn(2048, 2048)
    x = torch.randn(16)
    with clock.counting(), torch.no_grad():
        a @ a
        for _ in range(10):
            x.add_(1.0)
    mm = 2 * 2048**3 / (GPU.flops("fp32") * GPU.compute_efficiency)
    assert mm > 11 * _dispatch("no_grad")  # long enough to hide every launch after it
    assert clock.host == pytest.approx(11 * _dispatch("no_grad"))  # the host is far ahead
    assert clock.now() == pytest.approx(_dispatch("no_grad") + mm + 10 * GPU.min_kernel_time, rel=1e-12)
    clock.sync()  # e.g. .item() or the step's end: the host catches up with the device
    assert clock.host == clock.now()


def test_launch_a_wait_holds_the_device_not_the_host():
    clock = VirtualClock(GPU, 0)
    x = torch.randn(16)
    with clock.counting(), torch.no_grad():
        x.add_(1.0)
        clock.join(1e-3)  # a collective the stream waits for
        x.add_(1.0)
    assert clock.waits == [(_dispatch("no_grad") + GPU.min_kernel_time, 1e-3)]
    assert clock.host == pytest.approx(2 * _dispatch("no_grad"))  # issued long before the wait ends
    assert clock.now() == pytest.approx(1e-3 + GPU.min_kernel_time)
    s = clock.split
    assert s["wait"] == pytest.approx(1e-3 - _dispatch("no_grad") - GPU.min_kernel_time)
    assert s["kernel"] + s["launch_wait"] + s["wait"] == pytest.approx(clock.now(), rel=1e-12)


def test_cpu_profiles_keep_the_additive_dispatch():
    """this-machine: the core that dispatches computes, so overhead and kernel add up."""
    cpu = load_profile("this-machine-default")
    assert not cpu.async_launch
    profile = dataclasses.replace(cpu, op_overhead=3e-5)
    clock = VirtualClock(profile, 0)
    x = torch.randn(16)
    with clock.counting(), torch.no_grad():
        for _ in range(10):
            x.add_(1.0)
    kernel = 2 * 16 * 4 / cpu.memory_bandwidth
    assert clock.now() == pytest.approx(10 * (kernel + 3e-5), rel=1e-12)
    assert clock.host == clock.now() and clock.split["launch_wait"] == 0.0
    assert clock.split["host"] + clock.split["kernel"] == pytest.approx(clock.now(), rel=1e-12)


# ------------------------------------------------------------ send/recv, all-reduce (b, c, d)

def _scenarios():
    ctx = mgpukit.current()
    out = {}

    # (b) rank 0 sends 1 MiB at virtual time 0; rank 1 receives it.
    rec = Recorder(ctx)
    t = torch.ones(2**18)  # 1 MiB of fp32
    if ctx.rank == 0:
        rec.send(t, 1)
    else:
        rec.recv(t, 0)
    out["p2p"] = rec.now()

    # (c) rank 1 computes a 256³ matmul first; then a 4 MiB all-reduce.
    rec = Recorder(ctx)
    a = torch.randn(256, 256)
    if ctx.rank == 1:
        with rec.compute("fwd"):
            a @ a
    rec.all_reduce(torch.ones(2**20))
    ev = [e for e in rec.events if e["stream"] == "comm"][0]
    out["allreduce"] = (ev["start"], ev["end"], rec.now())

    # (d) an async all-reduce overlapped with a matmul: comm-bound, then compute-bound.
    rec = Recorder(ctx)
    a = torch.randn(1024, 1024)
    for step, numel in enumerate((2**24, 2**10)):  # 64 MiB, then 4 KiB
        with rec.step(step):
            h = rec.all_reduce(torch.ones(numel), async_op=True)
            with rec.compute("bwd"):
                a @ a
            h.wait()
    out["overlap"] = rec.step_times

    # (d') a wait the recorder never sees (DDP's reducer waits on the future in C++):
    # touching the tensor an async all-reduce wrote makes compute wait for its end.
    rec = Recorder(ctx)
    g = torch.ones(2**20)
    with rec.compute("bwd"):
        h = rec.all_reduce(g, async_op=True)
        h.get_future().wait()  # as DDP does: the data is there, the clock not yet joined
        g.mul_(2.0)
    out["dependency"] = rec.now()
    rec.wait_all()
    out["grad"] = float(g[0])
    return out


@pytest.fixture(scope="module")
def scenarios():
    return mgpukit.launch(_scenarios, 2, mode="emulated", profile=H100, echo=False)


def test_send_recv_takes_exactly_alpha_plus_bytes_over_beta(scenarios):
    expected = LINK.alpha + 2**20 / LINK.beta
    assert scenarios[1]["p2p"] == expected
    assert scenarios[0]["p2p"] == expected  # a blocking send ends when the data has arrived


def test_all_reduce_starts_when_the_later_rank_is_ready_and_lasts_the_ring_formula(scenarios):
    ready = matmul_seconds(256)  # rank 1's compute; rank 0 was ready at 0
    end = ready + allreduce_seconds(2**22, 2)
    for rank in (0, 1):
        assert scenarios[rank]["allreduce"] == (ready, end, end)


def test_async_all_reduce_overlaps_compute_step_ends_at_the_later_of_the_two(scenarios):
    compute = matmul_seconds(1024)
    big, small = allreduce_seconds(2**26, 2), allreduce_seconds(2**12, 2)
    assert big > compute > small  # one step of each kind
    assert scenarios[0]["overlap"] == [max(compute, big), max(compute, small)]


def test_touching_a_tensor_an_async_all_reduce_writes_waits_for_it(scenarios):
    mul = 2 * 2**20 * 4 / H100.memory_bandwidth  # read and write 4 MiB
    assert scenarios[0]["dependency"] == allreduce_seconds(2**22, 2) + mul
    assert scenarios[0]["grad"] == 4.0  # (1 + 1) · 2: the data really was reduced first


# ------------------------------------------------------------------ many workers (e)

def _ring(n_expected):
    ctx = mgpukit.current()
    r, n = ctx.rank, ctx.world_size
    rec = Recorder(ctx)
    a = torch.randn(128, 128)
    with rec.compute("fwd"):  # rank r computes r+1 matmuls of 128³
        for _ in range(r + 1):
            a @ a
    t = torch.full((2**16,), float(r))
    rec.all_reduce(t)
    after_allreduce = rec.now()
    buf = torch.empty(2**16)
    # a ring shift, evens send first so nobody deadlocks
    for phase in (0, 1):
        if r % 2 == phase:
            rec.send(t, (r + 1) % n)
        else:
            rec.recv(buf, (r - 1) % n)
    return {"sum": float(t[0]), "after_allreduce": after_allreduce, "end": rec.now(), "n": n == n_expected}


@pytest.mark.parametrize("workers", [4, 8])
def test_four_and_eight_emulated_workers_on_a_small_machine(workers):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        out = mgpukit.launch(_ring, workers, workers, mode="emulated", profile=H100, echo=False)
    total = float(sum(range(workers)))
    ready = workers * matmul_seconds(128)  # the last rank computed `workers` matmuls
    end = ready + allreduce_seconds(2**18, workers)
    assert [o["sum"] for o in out] == [total] * workers
    assert {o["after_allreduce"] for o in out} == {end}
    assert all(o["n"] for o in out)
    hop = LINK.alpha + 2**18 / LINK.beta
    assert all(o["end"] >= end + hop for o in out)


# ------------------------------------------------------------------ determinism (a)

def _ddp():
    return experiment.run("ddp", workers=2, steps=3, mode="emulated", profile=PROFILE, parity=False)


def _burn(seconds):
    import time

    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        pass


def test_emulated_timeline_is_identical_run_after_run_even_on_a_loaded_host():
    first = _ddp()
    hog = multiprocessing.get_context("fork").Process(target=_burn, args=(60,), daemon=True)
    hog.start()  # burns a core while the second run goes on
    try:
        second = _ddp()
    finally:
        hog.terminate()
        hog.join()
    assert first["timeline"] == second["timeline"]
    assert first["step_time_s"] == second["step_time_s"]
    assert first["losses"] == second["losses"]
    comm = [e for e in first["timeline"] if e["stream"] == "comm"]
    assert comm and all(e["start"] >= 0 and e["end"] > e["start"] for e in comm)


def test_inplace_foreach_charges_what_it_writes_and_cpu_scalars_run_on_the_host():
    """`_foreach_add_(xs, ys)` returns nothing but writes its first list: read 2, write 1. Adam's
    step counters are CPU scalars beside GPU tensors (`state["step"]` unless capturable/fused):
    their ops and `.item()` cost the host `host_op` each, no kernel and no sync."""
    xs, ys = [torch.ones(2**16) for _ in range(3)], [torch.ones(2**16) for _ in range(3)]
    clock = VirtualClock(H100, 0)
    with clock.counting():
        torch._foreach_add_(xs, ys)
    assert clock.bytes_moved == 3 * 3 * 2**16 * 4

    gpu = load_profile(PROFILE)
    steps = [torch.tensor(0.0) for _ in range(4)]
    clock = VirtualClock(gpu, 0)
    with clock.counting(), torch.no_grad():
        torch._foreach_add_(steps, 1)
        [s.item() for s in steps]
    assert clock.split["kernel"] == 0.0 and clock.now() == 0.0  # the device never saw them
    assert clock.host == pytest.approx(5 * gpu.host_scalar_op)


def test_fp32_gemm_and_causal_attention_are_timed_by_shape_on_a_gpu_profile():
    from mgpukit.costmodel.kernels import attention_seconds, gemm_seconds

    gpu = load_profile(PROFILE).kernels_only()
    a, b = torch.randn(512, 256), torch.randn(256, 384)
    clock = VirtualClock(gpu, 0)
    with clock.counting():
        a @ b
    assert clock.now() == pytest.approx(gemm_seconds(512, 384, 256, gpu, dtype="fp32"), rel=1e-12)
    q = torch.randn(2, 4, 128, 16)
    clock = VirtualClock(gpu, 0)
    with clock.counting():
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert clock.now() == pytest.approx(attention_seconds(8, 128, 128, 16, gpu, dtype="fp32", causal=True,
                                                          nbytes=clock.bytes_moved), rel=1e-9)


def test_a_gradient_hooks_ops_are_charged_as_no_grad_and_the_accumulation_as_backward():
    """DDP's reducer copies each gradient into its bucket from a hook on the leaf's
    AccumulateGrad node: no autograd node of its own, no module code. Charged as a backward op
    (× model_code_factor) it cost 47 µs per tensor on h100-nvlink instead of a no_grad op's 10."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from mgpukit.measure.op_cost import op_context

    w = torch.ones(4, requires_grad=True)
    bucket = torch.zeros(4)

    def into_bucket(p):
        bucket.copy_(p.grad)

    w.register_post_accumulate_grad_hook(into_bucket)
    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func.overloadpacket.__name__, op_context(args, kwargs, func)))
            return func(*args, **(kwargs or {}))

    with Spy():
        (w * 2).sum().backward()  # first backward: the gradient is stolen, then the hook copies
        (w * 3).sum().backward()  # second: AccumulateGrad adds, then the hook copies
    assert ("copy_", "no_grad") in seen and ("copy_", "backward") not in seen, seen
    assert ("add_", "backward") in seen or ("add", "backward") in seen, seen
    assert ("mul", "backward") in seen, seen  # the model's own backward node stays backward
