"""Sanity: emulated timelines of observed pipelining (1F1B), DDP and FSDP2 (printed)."""
import sys
import mgpukit
sys.path.insert(0, "tests")
import test_observe as T
from mgpukit.measure.recorder import Recorder
from mgpukit.measure.observe import CommObserver


def ddp_fsdp(which):
    import torch, torch.nn as nn
    ctx = mgpukit.current()
    rec = Recorder(ctx)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    if which == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (2,))
        for l in (model[0], model[2]): fully_shard(l, mesh=mesh)
        fully_shard(model, mesh=mesh)
    with CommObserver(rec):
        for step in range(2):
            with rec.step(step):
                with rec.compute("fwd"):
                    loss = model(torch.randn(64, 256)).sum()
                with rec.compute("bwd"):
                    loss.backward()
                with rec.compute("opt"):
                    for p in model.parameters(): p.grad = None
    return rec.events, rec.step_times, dict(rec.collectives)


if __name__ == "__main__":
    out = mgpukit.launch(T._pipeline_worker, 2, "1f1b", 2, mode="emulated", profile="h100-nvlink", echo=False)
    for r, (steps, act) in enumerate(out):
        print("rank", r, "now", steps[1]["now"])
        for e in steps[1]["events"]:
            print(f"   {e['kind']:5s} {e['start']*1e6:9.2f} {e['end']*1e6:9.2f} us")
    for which in ("ddp", "fsdp"):
        out = mgpukit.launch(ddp_fsdp, 2, which, mode="emulated", profile="h100-nvlink", echo=False)
        ev, st, coll = out[0]
        print(which, "step times us", [round(x*1e6, 2) for x in st], coll)
        for e in ev:
            if e["step"] == 1: print(f"   {e['stream']:7s} {e['kind']:14s} {e['start']*1e6:9.2f} {e['end']*1e6:9.2f}")
