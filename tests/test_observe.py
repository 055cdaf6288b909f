"""`CommObserver` counts and times communication that libraries issue themselves.

Method: real 2-worker gloo launches. Inside, a `Recorder` is the observer's sink; the library
(torch.distributed, pipelining, FSDP2, DTensor TP, DDP) runs under the observer and the
recorder's counts, bytes and timeline must show exactly what moved: payload bytes, ring bus
bytes (all-reduce 2(n-1)/n·B, all-gather / reduce-scatter (n-1)/n·B, p2p B) and one "comm"
event per op that ends no earlier than it starts. Emulated variants check the virtual clock
charges the same alpha-beta cost as `Recorder.all_reduce`.
"""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import mgpukit
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.observe import CommObserver, unobserved
from mgpukit.measure.recorder import Recorder
from mgpukit.measure.vclock import collective_time

PROFILE = "h100-nvlink"
MiB = 1 << 20


def comm_events(rec, kind=None):
    return [e for e in rec.events if e["stream"] == "comm" and (kind is None or e["kind"] == kind)]


def summary(rec, obs=None):
    return {"collectives": dict(rec.collectives), "payload": rec.payload_bytes,
            "sent": rec.bytes_sent, "received": rec.bytes_received,
            "events": comm_events(rec), "untimed": obs.untimed if obs else 0}


# ---- (a) plain collectives ------------------------------------------------------------------

def _all_reduce_worker():
    rec = Recorder(mgpukit.current())
    t = torch.ones(MiB // 4)  # 1 MiB fp32
    obs = CommObserver(rec)
    with obs:
        dist.all_reduce(t)
        with unobserved():  # what the recorder will do around its own dist calls
            rec.all_reduce(t)  # counted once, by the recorder
        dist.reduce_scatter_tensor(torch.empty(MiB // 8), t)  # no future on gloo: timed by wait
        w = dist.all_gather_into_tensor(torch.empty(MiB // 2), t, async_op=True)
        w.wait()
    return summary(rec, obs), float(t[0])


def test_all_reduce_counts_once_with_ring_bus_bytes():
    out = mgpukit.launch(_all_reduce_worker, 2, mode="cpu", echo=False)
    n = 2
    for s, value in out:
        assert value == 4.0  # two real all-reduces ran
        assert s["collectives"] == {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}
        ar = 2 * (n - 1) / n * MiB  # per all-reduce
        rs = (n - 1) / n * MiB  # reduce-scatter of the 1 MiB input
        ag = (n - 1) / n * 2 * MiB  # all-gather into the 2 MiB output
        assert s["payload"] == 2 * MiB + MiB + 2 * MiB
        assert s["sent"] == s["received"] == 2 * ar + rs + ag
        kinds = sorted(e["kind"] for e in s["events"])
        assert kinds == ["all_gather", "all_reduce", "all_reduce", "reduce_scatter"]
        assert all(e["end"] >= e["start"] for e in s["events"]) and s["untimed"] == 0


def _emulated_all_reduce_worker():
    ctx = mgpukit.current()
    rec = Recorder(ctx)
    t = torch.ones(MiB // 4)
    with CommObserver(rec):
        with rec.compute("fwd"):  # _CostMode on top of the observer: the usual nesting
            dist.all_reduce(t)
            t.mul_(2)  # touches the pending tensor: the compute stream joins the all-reduce
        work = dist.all_reduce(t, async_op=True)
        work.wait()  # Python wait joins the clock at the collective's end
    with rec.compute("bwd"), CommObserver(rec):  # the other nesting: observer on top
        dist.all_reduce(t)
        t.mul_(2)
    return summary(rec), rec.clock.now()


def test_emulated_all_reduce_charges_the_recorders_alpha_beta_cost():
    out = mgpukit.launch(_emulated_all_reduce_worker, 2, mode="emulated", profile=PROFILE,
                         echo=False)
    cost = collective_time("all_reduce", MiB, [0, 1], load_profile(PROFILE))
    for s, now in out:
        assert s["collectives"] == {"all_reduce": 3}
        first, second, third = s["events"]
        for e in s["events"]:
            assert e["end"] - e["start"] == pytest.approx(cost)
        assert second["start"] >= first["end"]  # the mul_ waited for the first one
        assert third["start"] >= second["end"]  # the wait() joined the second one
        assert now >= third["end"]  # the mul_ waited for the third one
    times = [[(e["start"], e["end"]) for e in s["events"]] for s, _ in out]
    assert times[0] == times[1]  # the same virtual times on both ranks


# ---- (b) torch.distributed.pipelining --------------------------------------------------------

def _pipeline_worker(schedule, steps):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from mgpukit.models.gpt import GPT, gpt_tiny, lm_loss
    from mgpukit.strategies.pipeline.stages import split_model

    ctx = mgpukit.current()
    r = ctx.rank
    cfg = gpt_tiny(n_layer=2, seq_len=16)
    stage = PipelineStage(split_model(GPT(cfg), 2, keep=[r])[r], r, 2, torch.device("cpu"))
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    sched = cls(stage, 4, loss_fn=lm_loss)
    x = torch.randint(0, cfg.vocab_size, (8, cfg.seq_len))
    out = []
    for _ in range(steps):  # step 0 also exchanges shapes (send_object_list): counted apart
        rec = Recorder(ctx)
        with CommObserver(rec):
            with rec.compute("fwd_bwd"):
                sched.step(*((x,) if r == 0 else ()), target=x if r == 1 else None)
        out.append(summary(rec) | {"now": rec.clock.now()})
    return out, (2 * cfg.seq_len * cfg.d_model * 4)  # one micro-batch's activation (B·T·C·4)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipelining_sends_and_receives_are_counted(schedule):
    out = mgpukit.launch(_pipeline_worker, 2, schedule, 2, mode="cpu", echo=False)
    m = 4
    for rank, (steps, act) in enumerate(out):
        s = steps[1]  # steady state
        assert s["collectives"] == {"send": m, "recv": m}
        # rank 0 sends activations and receives their gradients; rank 1 the other way round
        assert s["sent"] == s["received"] == m * act
        assert s["payload"] == 2 * m * act
        assert sorted(e["kind"] for e in s["events"]) == ["recv"] * m + ["send"] * m
        assert all(e["end"] >= e["start"] for e in s["events"])
        assert steps[0]["sent"] > m * act  # step 0: + the shape-inference messages


def test_pipelining_on_the_virtual_clock():
    out = mgpukit.launch(_pipeline_worker, 2, "1f1b", 2, mode="emulated", profile=PROFILE,
                         echo=False)
    (steps0, act), (steps1, _) = out
    s0, s1 = steps0[1], steps1[1]
    assert s0["collectives"] == s1["collectives"] == {"send": 4, "recv": 4}
    assert s0["sent"] == 4 * act
    # rank 1 cannot start before the first activation arrives: its first recv ends after
    # rank 0's first send started (times are virtual: identical run after run)
    first_recv = min((e for e in s1["events"] if e["kind"] == "recv"), key=lambda e: e["end"])
    first_send = min((e for e in s0["events"] if e["kind"] == "send"), key=lambda e: e["start"])
    assert first_recv["end"] >= first_send["end"] > first_send["start"]


# ---- (c) FSDP2 ----------------------------------------------------------------------------------

def _fsdp2_worker():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    rec = Recorder(mgpukit.current())
    mesh = init_device_mesh("cpu", (2,))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    obs = CommObserver(rec)
    with obs:
        model(torch.randn(4, 16)).sum().backward()
    return summary(rec, obs)


def test_fsdp2_all_gathers_and_reduce_scatters_are_counted():
    out = mgpukit.launch(_fsdp2_worker, 2, mode="cpu", echo=False)
    param_bytes = (16 * 32 + 32 + 32 * 16 + 16) * 4  # both layers, unsharded
    for s in out:
        # forward gathers each layer; backward gathers it again (resharded after forward)
        # and reduce-scatters its gradients
        assert s["collectives"] == {"all_gather": 4, "reduce_scatter": 2}
        assert s["payload"] == 2 * param_bytes + param_bytes  # even split: no padding here
        assert s["sent"] == s["received"] == (2 - 1) / 2 * s["payload"]
        assert len(s["events"]) == 6 and s["untimed"] == 0


# ---- (d) DDP's C++ reducer, (e) DTensor TP -----------------------------------------------

def _ddp_worker():
    from torch.nn.parallel import DistributedDataParallel as DDP

    rec = Recorder(mgpukit.current())
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)))
    obs = CommObserver(rec)
    with obs:
        model(torch.randn(4, 16)).sum().backward()
    return summary(rec, obs)


def test_ddp_reducer_is_visible_to_dispatch():
    """DDP's reducer calls ProcessGroup::allreduce from C++, and that dispatches c10d.allreduce_:
    the observer counts the gradient bucket and times it by the work's future."""
    out = mgpukit.launch(_ddp_worker, 2, mode="cpu", echo=False)
    grad_bytes = (16 * 32 + 32 + 32 * 16 + 16) * 4  # one bucket
    for s in out:
        assert s["collectives"] == {"all_reduce": 1}
        assert s["payload"] == grad_bytes and s["sent"] == grad_bytes  # 2(n-1)/n = 1 at n=2
        assert len(s["events"]) == 1 and s["untimed"] == 0


def _tp_worker():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    torch.manual_seed(0)
    rec = Recorder(mgpukit.current())
    mesh = init_device_mesh("cpu", (2,))
    model = parallelize_module(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)),
                               mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    obs = CommObserver(rec)
    with obs:
        model(torch.randn(4, 16)).sum().backward()
    return summary(rec, obs)


def test_dtensor_tp_functional_all_reduce_is_counted_and_timed_at_its_wait():
    out = mgpukit.launch(_tp_worker, 2, mode="cpu", echo=False)
    for s in out:
        # RowwiseParallel's output all-reduce (4 x 16 fp32); the input needs no gradient
        assert s["collectives"] == {"all_reduce": 1}
        assert s["payload"] == 4 * 16 * 4
        assert len(s["events"]) == 1 and s["untimed"] == 0
