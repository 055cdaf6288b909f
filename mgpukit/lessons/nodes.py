"""What crossing a node costs: one all-reduce with its ranks placed k to a node, emulated and predicted.

Inside a node GPUs all-reduce over NVLink (`intra_node` of the profile, ~370 GB/s per GPU on
`h100-ib`); a ring that spans nodes runs over the network (`inter_node`, ~45 GB/s per NIC) — but
with k ranks on each node it runs k rings at once over k NICs, so its bandwidth is
`min(intra, k · inter)` and its latency the network's (`costmodel.comm.link_for_ranks`).
So 16 GPUs on 2 full DGX nodes all-reduce almost as fast as 8 on one, while 8 GPUs one to a node
are ~8× slower on large messages.

`emulated_allreduce` runs the all-reduce on emulated workers whose profile places them
`ranks_per_node` to a node, and reads its duration off the virtual clock. The full-size buffer
is charged without being moved (`VirtualClock.collective`, the very call `Recorder.all_reduce`
makes before it hands the data to gloo): 16 ranks × 1 GiB would not fit in a laptop. Beside it
a small real all-reduce (`probe_bytes`) goes the whole way through `Recorder.all_reduce`, data
and all, and its event is checked against the same formula. The emulator and the cost model
share the alpha-beta formulas, so what agreement shows is the plumbing: which ranks the clock
puts on which node, and which link it charges for them.
"""
from __future__ import annotations

import dataclasses

import torch

from mgpukit.costmodel.comm import allreduce_time, link_for_ranks
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.recorder import Recorder, group_ranks
from mgpukit.runtime.launcher import launch


def placed(profile: str = "h100-ib", ranks_per_node: int | None = None):
    """`profile` with `ranks_per_node` GPUs used per node (default: the profile's own)."""
    hw = load_profile(profile)
    return hw if ranks_per_node is None else dataclasses.replace(hw, gpus_per_node=ranks_per_node)


def predicted_allreduce(nbytes: float, workers: int, profile: str = "h100-ib",
                        ranks_per_node: int | None = None) -> float:
    """The cost model's ring all-reduce time for `workers` ranks placed `ranks_per_node` to a node."""
    hw = placed(profile, ranks_per_node)
    return allreduce_time(nbytes, workers, link_for_ranks(range(workers), hw))


def _allreduce_rank(ctx, nbytes: int, probe_bytes: int) -> dict:
    rec = Recorder(ctx)
    group = ctx.group("dp")
    with rec.untimed():  # the clock's own timestamp exchange; charges the full buffer, moves none
        start, end = rec.clock.collective("all_reduce", nbytes, group_ranks(group), group)
    rec.clock.join(end)
    probe = torch.ones(probe_bytes // 4, device=ctx.device)  # fp32
    rec.all_reduce(probe, group=group)
    event = rec.events[-1]
    return {"node": ctx.node, "charged_s": end - start, "probe_s": event["end"] - event["start"],
            "probe_inter_node": bool(event.get("inter_node")), "probe_ok": bool((probe == ctx.world_size).all())}


def emulated_allreduce(nbytes: int = 2**30, workers: int = 8, *, profile: str = "h100-ib",
                       ranks_per_node: int | None = None, probe_bytes: int = 2**20) -> dict:
    """One all-reduce of `nbytes` on `workers` emulated GPUs, `ranks_per_node` to a node,
    beside the cost model's prediction (times in seconds)."""
    hw = placed(profile, ranks_per_node)
    ranks = launch(_allreduce_rank, workers, nbytes, probe_bytes, mode="emulated", profile=hw, echo=False,
                   takes_context=True)
    return {"workers": workers, "ranks_per_node": hw.gpus_per_node,
            "nodes": len({r["node"] for r in ranks}), "bytes": nbytes,
            "emulated_s": max(r["charged_s"] for r in ranks),
            "predicted_s": predicted_allreduce(nbytes, workers, profile, hw.gpus_per_node),
            "probe_bytes": probe_bytes, "probe_emulated_s": max(r["probe_s"] for r in ranks),
            "probe_predicted_s": predicted_allreduce(probe_bytes, workers, profile, hw.gpus_per_node),
            "probe_inter_node": ranks[0]["probe_inter_node"], "probe_ok": all(r["probe_ok"] for r in ranks)}
