"""Research: which c10d / functional ops does a TorchDispatchMode see on gloo (2 workers)?"""
import sys, json
import torch, torch.distributed as dist
import mgpukit
from torch.utils._python_dispatch import TorchDispatchMode


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.ops = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace != "aten":
            self.ops.append(str(func))
        return out


def probe(name, fn):
    log = Log()
    with log:
        fn()
    return name, log.ops


def worker():
    r, n = dist.get_rank(), dist.get_world_size()
    t = torch.ones(256)
    res = []
    res.append(probe("all_reduce", lambda: dist.all_reduce(t)))
    res.append(probe("all_reduce async", lambda: dist.all_reduce(t, async_op=True).wait()))
    def p2p():
        if r == 0: dist.send(t, 1)
        else: dist.recv(t, 0)
    res.append(probe("send/recv", p2p))
    def ip2p():
        w = dist.isend(t, 1) if r == 0 else dist.irecv(t, 0); w.wait()
    res.append(probe("isend/irecv", ip2p))
    def batch():
        ops = [dist.P2POp(dist.isend, t, 1 - r), dist.P2POp(dist.irecv, torch.empty(256), 1 - r)]
        for w in dist.batch_isend_irecv(ops): w.wait()
    res.append(probe("batch_isend_irecv", batch))
    res.append(probe("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(torch.empty(512), t)))
    res.append(probe("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(torch.empty(128), t)))
    res.append(probe("all_gather(list)", lambda: dist.all_gather([torch.empty(256) for _ in range(n)], t)))
    res.append(probe("broadcast", lambda: dist.broadcast(t, 0)))
    res.append(probe("barrier", lambda: dist.barrier()))
    import torch.distributed._functional_collectives as fc
    res.append(probe("funcol all_reduce", lambda: fc.all_reduce(t, "sum", dist.group.WORLD).wait()))
    res.append(probe("funcol all_gather", lambda: fc.all_gather_tensor(t, 0, dist.group.WORLD) + 0))
    return res

if __name__ == "__main__":
    out = mgpukit.launch(worker, 2, mode="cpu", echo=False)
    for name, ops in out[0]:
        print(f"{name:24s} r0={ops}  r1={out[1][[x[0] for x in out[1]].index(name)][1]}")
    print("torch", torch.__version__)
