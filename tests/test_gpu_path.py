"""The GPU path, checked without a GPU (issue 18).

Method: each trap that gloo forgives but NCCL or CUDA does not is made visible on CPU workers —
a device check at every collective, a guard that turns a factory call without `device=` into a
meta tensor, a strict point-to-point mode with NCCL's rendezvous rules, a fake CUDA clock that
counts synchronisations — and each check is shown to catch a planted bug before it is trusted.
"""
from __future__ import annotations

import time
import warnings

import pytest
import torch

import mgpukit
from mgpukit.runtime.launcher import OversubscribedWarning, launch


def _launch(fn, n, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        return launch(fn, n, *args, echo=False, timeout_s=kw.pop("timeout_s", 120), **kw)


# ---------------------------------------------------------------- numerics: mixed precision


def test_accelerate_mixed_precision_env_does_not_change_an_fp32_ddp_run(monkeypatch):
    """`accelerate launch --mixed_precision bf16` exports this; an fp32 run must stay fp32."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    rec = mgpukit.run("ddp", workers=2, steps=3, mode="cpu")
    assert rec["parity"]["ok"], rec["parity"]
    assert rec["extra"]["0"]["mixed_precision"] == "no"


# ---------------------------------------------------------------- timing


def _late_wait_worker():
    """Each async operation finishes within milliseconds; it is waited for 50 ms later."""
    import time

    from mgpukit.measure.recorder import Recorder

    ctx = mgpukit.current()
    rec = Recorder(ctx)
    peer = 1 - ctx.rank
    out = {}
    for name, post in [
        ("all_reduce", lambda: rec.all_reduce(torch.ones(1000), async_op=True)),
        ("exchange", lambda: rec.exchange(sends=[(torch.ones(1000), peer)],
                                          recvs=[(torch.empty(1000), peer)])),
    ]:
        seconds = []
        for _ in range(3):  # the best of 3: a busy 2-core host can delay the peer's post
            torch.distributed.barrier()
            handle = post()
            time.sleep(0.05)
            handle.wait()
            ev = rec.events[-1]
            seconds.append(ev["end"] - ev["start"])
        out[name] = min(seconds)
    return out


def test_async_work_is_stamped_when_it_finished_not_when_waited():
    """An end stamped at wait() would read >= 50 ms every time; the work itself takes a few ms
    on gloo (measured: 1-8 ms here, vs 50-53 ms when stamped at wait)."""
    for rank, durations in enumerate(_launch(_late_wait_worker, 2)):
        for name, seconds in durations.items():
            assert seconds < 0.02, f"rank {rank}: {name} recorded {seconds * 1e3:.1f} ms"


class _FakeEvent:
    """torch.cuda.Event without a GPU: records host time."""

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        import time

        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def _cuda_sync_worker(steps: int):
    """A GPU-shaped step on CPU workers: torch DDP with the recorder's comm hook, a gradient
    hook issuing an async all-reduce, a batched exchange and a blocking all-reduce — with a
    WallClock that believes it runs on CUDA and a `torch.cuda.synchronize` that counts."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mgpukit.measure.recorder import Recorder, WallClock
    from mgpukit.strategies.data_parallel.ddp import recorder_hook

    calls = {"sync": 0, "in_step": 0}
    torch.cuda.synchronize = lambda *a, **k: calls.__setitem__("sync", calls["sync"] + 1)
    torch.cuda.Event = _FakeEvent
    ctx = mgpukit.current()
    rec = Recorder(ctx, clock=WallClock(ctx.t0, torch.device("cuda")))
    torch.manual_seed(0)
    ddp = DistributedDataParallel(torch.nn.Linear(8, 8))
    ddp.register_comm_hook(rec, recorder_hook)
    side = torch.nn.Parameter(torch.ones(4))
    side.register_hook(lambda g: rec.all_reduce(g, async_op=True) and None)
    peer = 1 - ctx.rank
    for step in range(steps):
        with rec.step(step):
            before = calls["sync"]  # the step's start synchronised once
            with rec.compute("fwd"):
                loss = ddp(torch.ones(2, 8)).sum() + (side * 2).sum()
            with rec.compute("bwd"):
                loss.backward()
            rec.exchange(sends=[(torch.ones(3), peer)], recvs=[(torch.empty(3), peer)]).wait()
            rec.all_reduce(torch.ones(2))
            calls["in_step"] += calls["sync"] - before
    rec.result()
    ends = [e["end"] for e in rec.events]
    return {**calls, "resolved": all(isinstance(t, float) for t in ends), "events": len(ends)}


def test_hooks_and_collectives_never_synchronize_cuda_between_step_bounds():
    steps = 2
    for out in _launch(_cuda_sync_worker, 2, steps):
        assert out["in_step"] == 0, out  # nothing between a step's start and its end
        assert out["sync"] == 2 * steps, out  # one at each step's start, one at its end
        assert out["resolved"] and out["events"] > 4 * steps, out


# ---------------------------------------------------------------- fork safety


def test_importing_mgpukit_makes_cuda_queries_fork_safe():
    import os

    assert os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"


def test_bad_fork_in_gpu_mode_names_the_cause_and_the_fix(monkeypatch):
    """A notebook that touched CUDA before launching: refused before any worker is forked."""
    from mgpukit.runtime import launcher, modes

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(modes, "cuda_device_count", lambda: 4)
    forked = []
    monkeypatch.setattr(launcher, "_run", lambda *a, **k: forked.append(1))
    with pytest.raises(launcher.LaunchError) as err:
        launch(lambda: None, 2, mode="gpu")
    assert "CUDA was initialised in the parent before fork; restart the kernel and keep CUDA " \
           "calls inside the launched function" in str(err.value)
    assert not forked


def test_returned_tensors_come_back_on_cpu(monkeypatch):
    """The walk that moves a worker's returned tensors to the CPU (a meta tensor stands in for
    a CUDA one; `.cpu()` is faked because a meta tensor has no data to copy)."""
    from collections import OrderedDict, namedtuple

    from mgpukit.runtime.worker import _to_cpu

    monkeypatch.setattr(torch.Tensor, "cpu", lambda self: torch.zeros(self.shape))
    Pair = namedtuple("Pair", "a b")
    meta = torch.empty(2, device="meta")
    out = _to_cpu({"w": OrderedDict(x=meta), "l": [meta, (meta, 3)], "p": Pair(meta, "s")})
    assert out["w"]["x"].device.type == "cpu" and isinstance(out["w"], OrderedDict)
    assert out["l"][0].device.type == "cpu" and out["l"][1][0].device.type == "cpu"
    assert out["l"][1][1] == 3 and isinstance(out["p"], Pair) and out["p"].b == "s"


# ---------------------------------------------------------------- device guard

# A bug planted *as mgpukit code* (the code object carries a path inside the package, which is
# what the guard looks at): a bookkeeping tensor made without device= and all-reduced.
_PLANTED = '''
def planted_bug(rec):
    t = torch.tensor([float(rec.rank)], dtype=torch.float64)  # no device=: CPU by luck
    rec.all_reduce(t)
    return float(t.item())
'''


def _planted_worker(fixed: bool):
    from pathlib import Path

    from mgpukit.measure.device_guard import DeviceGuard
    from mgpukit.measure.recorder import Recorder

    src = _PLANTED.replace("float64)", "float64, device=rec.ctx.device)") if fixed else _PLANTED
    path = str(Path(mgpukit.__file__).parent / "strategies" / "_planted.py")
    scope = {"torch": torch}
    exec(compile(src, path, "exec"), scope)
    ctx = mgpukit.current()
    outside = scope["planted_bug"](Recorder(ctx))  # without the guard the bug passes on CPU
    with DeviceGuard():
        return outside, scope["planted_bug"](Recorder(ctx))


def test_device_guard_catches_a_factory_call_without_device():
    from mgpukit.runtime.launcher import WorkerError

    with pytest.raises(WorkerError, match="meta.*device guard"):
        _launch(_planted_worker, 2, False)
    assert _launch(_planted_worker, 2, True) == [(1.0, 1.0)] * 2  # the fix passes under it


GUARDED = ["dp-naive", "dp-bucketed", "allreduce-ring", "dp-int8", "dp-topk", "dp-powersgd",
           "dp-fp16"]


@pytest.mark.parametrize("strategy", GUARDED)
def test_strategies_are_clean_under_the_device_guard(strategy, monkeypatch):
    monkeypatch.setenv("MGPUKIT_DEVICE_GUARD", "1")  # read by launch(), handed to the workers
    rec = mgpukit.run(strategy, workers=2, steps=2, mode="cpu")
    assert rec["parity"]["ok"], rec["parity"]


# ---------------------------------------------------------------- strict point-to-point


def _strict_worker(impl: str, batched: bool):
    from mgpukit.measure.recorder import Recorder
    from mgpukit.strategies.communication import collectives as C

    ctx = mgpukit.current()
    rec = Recorder(ctx)
    if not batched:  # the pre-issue-18 exchange: a separate isend, then irecv
        def unbatched(rec, send, dst, recv, src, group):
            handles = [rec.isend(send, dst, group=group), rec.irecv(recv, src, group=group)]
            for h in handles:
                h.wait()
        C._exchange = unbatched
    t = torch.arange(7, dtype=torch.float32) * (ctx.rank + 1)
    C.all_reduce_fn(impl)(rec, t)
    n = ctx.world_size
    return bool(torch.equal(t, torch.arange(7, dtype=torch.float32) * n * (n + 1) / 2))


@pytest.mark.parametrize("impl,n", [("ring", 2), ("ring", 3), ("ring", 4), ("tree", 2),
                                    ("tree", 4), ("naive", 3)])
def test_all_reduces_finish_under_strict_p2p(impl, n):
    """NCCL's rendezvous rules (measure/p2p_strict.py) on gloo: the batched exchange passes."""
    assert all(_launch(_strict_worker, n, impl, True, options={"strict_p2p": True}))


@pytest.mark.parametrize("impl,n", [("ring", 2), ("ring", 3)])
def test_strict_p2p_catches_the_unbatched_exchange(impl, n):
    """The test of the test: isend-then-irecv passes on plain gloo and hangs under strict mode
    — n = 2: both ranks' sends wait behind each other on the pair; n = 3: the ring of pair
    communicators, each waiting for its other rank to arrive."""
    from mgpukit.runtime.launcher import LaunchTimeout

    assert all(_launch(_strict_worker, n, impl, False))
    with pytest.raises(LaunchTimeout):
        _launch(_strict_worker, n, impl, False, options={"strict_p2p": True}, timeout_s=4)


# ---------------------------------------------------------------- strict p2p: pipelines

STRICT_TIMEOUT = 90  # a hang fails in a minute and a half, not the default ten
PIPELINES = [("mp-naive", {"pp": 2}), ("pp-gpipe", {"pp": 2}), ("pp-1f1b", {"pp": 2}),
             ("pp-interleaved", {"pp": 2}), ("pp-zb", {"pp": 2}),
             ("pp-gpipe", {"pp": 4}), ("pp-1f1b", {"pp": 4}), ("pp-zb", {"pp": 4}),
             # interleaved at p=4 needs 8 layers (gpt-tiny has 4): the lab test below runs it
             ("pp-gpipe", {"dp": 2, "pp": 2}), ("pp-1f1b", {"dp": 2, "pp": 2}),
             ("pp-interleaved", {"dp": 2, "pp": 2}), ("pp-zb", {"dp": 2, "pp": 2})]


def _executed(rec: dict, rank: int) -> list:
    from mgpukit.costmodel.schedules import Action

    kinds = {"fwd": "F", "bwd": "B", "bwd_input": "I", "bwd_weight": "W"}
    return [Action(kinds[e["kind"]], e["microbatch"], e["stage"]) for e in rec["timeline"]
            if e["rank"] == rank and e.get("step") == 0 and e["kind"] in kinds]


@pytest.mark.parametrize("strategy,layout", PIPELINES,
                         ids=[f"{s}-" + "x".join(f"{k}{v}" for k, v in lay.items()) for s, lay in PIPELINES])
def test_every_pipeline_schedule_finishes_under_strict_p2p(strategy, layout, monkeypatch):
    """NCCL's rendezvous rules on gloo (measure/p2p_strict.py): each round's sends and
    receives go out as one batch (pipeline/p2p.py), so every schedule finishes — at the same
    parity, having run exactly its table. Before the batching, pp-interleaved at p=2 hung."""
    from mgpukit.costmodel.schedules import build_schedule

    monkeypatch.setenv("MGPUKIT_STRICT_P2P", "1")
    workers = layout.get("dp", 1) * layout["pp"]
    rec = mgpukit.run(strategy, workers=workers, steps=2, mode="cpu", layout=layout,
                      timeout_s=STRICT_TIMEOUT)
    assert rec["parity"]["ok"], rec["parity"]
    th, p = rec["theory"], layout["pp"]
    table = build_schedule(th["schedule"], p, th["m"], th["v"])
    for rank in range(workers):
        pp_rank = rec["extra"][str(rank)]["stages"][0] % p  # stage s lives on pp rank s % p
        assert _executed(rec, rank) == table[pp_rank]


def test_interleaved_v2_at_p4_and_every_schedule_finish_under_strict_p2p(monkeypatch):
    """The lab's equal-cost stages (enough layers for v=2 at p=4), measured on CPU workers
    under strict mode; each schedule ran exactly its table."""
    from mgpukit.costmodel.schedules import build_schedule
    from mgpukit.lessons import run_lab

    monkeypatch.setenv("MGPUKIT_STRICT_P2P", "1")
    specs = [{"schedule": "gpipe", "m": 4}, {"schedule": "1f1b", "m": 4},
             {"schedule": "interleaved", "m": 4, "v": 2}, {"schedule": "zb-h1", "m": 4}]
    for rec in run_lab(specs, p=4, mode="cpu", steps=1, timeout_s=STRICT_TIMEOUT):
        th = rec["theory"]
        table = build_schedule(th["schedule"], 4, th["m"], th["v"])
        assert [_executed(rec, r) for r in range(4)] == table


class _Each:
    def __init__(self, handles):
        self.handles = handles

    def wait(self):
        for h in self.handles:
            h.wait()


def _one_message_at_a_time(self, sends, recvs, *, waited_now):
    """The same rounds, without the batch: every message its own isend / irecv."""
    got = {msg: torch.empty(self.shape, dtype=self.dtype, device=self.device) for msg in recvs}
    handles = [self.rec.isend(t.contiguous(), self.stage_rank(msg.dst_stage), group=self.group)
               for msg, t in sends.items()]
    handles += [self.rec.irecv(buf, self.stage_rank(msg.src_stage), group=self.group)
                for msg, buf in got.items()]
    return _Each(handles), got


def test_strict_p2p_catches_a_pipeline_without_batches(monkeypatch):
    """The test of the test: the same rounds with each message posted on its own pass on
    plain gloo (it buffers sends) and hang under strict mode — in 1F1B's steady state the two
    ranks send to each other in the same round, and each one's send waits for the other's
    receive, queued behind the other's send."""
    from mgpukit.runtime.launcher import LaunchTimeout
    from mgpukit.strategies.pipeline.p2p import StageLinks

    monkeypatch.setattr(StageLinks, "post", _one_message_at_a_time)  # inherited by the fork
    start = time.perf_counter()
    assert mgpukit.run("pp-1f1b", workers=2, steps=2, mode="cpu", timeout_s=STRICT_TIMEOUT)["parity"]["ok"]
    plain_s = time.perf_counter() - start  # the same run, without strict mode, on this machine now
    monkeypatch.setenv("MGPUKIT_STRICT_P2P", "1")
    with pytest.raises(LaunchTimeout):  # a hang: three times what the plain run took, not a fixed 20 s
        mgpukit.run("pp-1f1b", workers=2, steps=2, mode="cpu", timeout_s=min(20.0, max(5.0, 3 * plain_s)))


def test_strict_p2p_leaves_the_virtual_clock_alone(monkeypatch):
    """Strict mode checks correctness, not time: an emulated pipeline's timeline is the same
    with it (its extra waits never reach the virtual clock)."""
    def run():
        return mgpukit.run("pp-interleaved", workers=2, steps=2, mode="emulated",
                           profile="h100-nvlink", timeout_s=STRICT_TIMEOUT)

    plain = run()
    monkeypatch.setenv("MGPUKIT_STRICT_P2P", "1")
    strict = run()
    assert strict["parity"]["ok"]
    assert strict["step_time_s"] == plain["step_time_s"]
    assert strict["bubble_fraction"] == plain["bubble_fraction"]
