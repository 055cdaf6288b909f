"""Research: what a TorchDispatchMode sees from torch.distributed.pipelining, FSDP2, DTensor TP and
DDP on 2 gloo workers. Prints per library: the non-aten ops seen (name -> count) and the Python
Work.wait calls seen (class-level patch)."""
from collections import Counter
import torch, torch.nn as nn, torch.distributed as dist
import mgpukit
from torch.utils._python_dispatch import TorchDispatchMode
from torch._C._distributed_c10d import Work


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.ops = Counter(); self.bytes = Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace != "aten":
            self.ops[str(func)] += 1
            t = args[0]
            if isinstance(t, list): t = t[0]
            if isinstance(t, torch.Tensor):
                self.bytes[str(func)] += t.numel() * t.element_size()
        return out


def observe(fn):
    orig, waits = Work.wait, Counter()
    def wait(self, *a, **k):
        waits["Work.wait"] += 1
        return orig(self, *a, **k)
    Work.wait = wait
    log = Log()
    try:
        with log:
            fn()
    finally:
        Work.wait = orig
    return dict(log.ops), dict(log.bytes), dict(waits)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


def pipelining(schedule):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from mgpukit.models.gpt import GPT, gpt_tiny, lm_loss
    from mgpukit.strategies.pipeline.stages import split_model
    r = dist.get_rank()
    cfg = gpt_tiny()
    stages = split_model(GPT(cfg), 2, keep=[r])
    st = PipelineStage(stages[r], r, 2, torch.device("cpu"))
    sched = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](st, 4, loss_fn=lm_loss)
    x = torch.randint(0, cfg.vocab_size, (8, cfg.seq_len))
    def run():
        sched.step(*((x,) if r == 0 else ()), target=x if r == 1 else None)
    return observe(run)


def fsdp2():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (2,))
    m = mlp()
    for layer in m:
        if isinstance(layer, nn.Linear): fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    def run():
        m(torch.randn(4, 16)).sum().backward()
    return observe(run)


def tp():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (2,))
    m = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    def run():
        m(torch.randn(4, 16)).sum().backward()
    return observe(run)


def ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP
    res = {}
    res["ctor"] = observe(lambda: res.__setitem__("m", DDP(mlp())))
    m = res.pop("m")
    res["step"] = observe(lambda: m(torch.randn(4, 16)).sum().backward())
    return res


def worker(what):
    return {"pipe-gpipe": lambda: pipelining("gpipe"), "pipe-1f1b": lambda: pipelining("1f1b"),
            "fsdp2": fsdp2, "tp": tp, "ddp": ddp}[what]()


if __name__ == "__main__":
    import sys
    for what in sys.argv[1:] or ["pipe-gpipe", "pipe-1f1b", "fsdp2", "tp", "ddp"]:
        out = mgpukit.launch(worker, 2, what, mode="cpu", echo=False)
        print(f"== {what}")
        for r, o in enumerate(out):
            print(f"  rank {r}: {o}")
