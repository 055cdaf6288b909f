"""Research: for gloo works without a future (send, recv, reduce_scatter): can we see the wait?
Is Work.unbox(...) in the dispatch mode the same Python object that dist.isend returns, and can
Work.wait be patched at class level?"""
import time, weakref
import torch, torch.distributed as dist
import mgpukit
from torch.utils._python_dispatch import TorchDispatchMode
from torch._C._distributed_c10d import Work

seen = {}

class M(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "c10d":
            boxed = out[1] if isinstance(out, (tuple, list)) else out
            w = Work.unbox(boxed)
            seen[id(w)] = (str(func), w)
        return out

def worker():
    r = dist.get_rank()
    t = torch.ones(1024)
    res = {}
    with M():
        w = dist.isend(t, 1) if r == 0 else dist.irecv(t, 0)
    res["same_object"] = id(w) in seen and seen[id(w)][1] is w
    try:
        weakref.ref(w); res["weakref"] = True
    except TypeError as e:
        res["weakref"] = repr(e)
    orig = Work.wait
    calls = []
    def wait(self, *a, **k):
        calls.append(id(self)); return orig(self, *a, **k)
    try:
        Work.wait = wait
        res["patch"] = True
    except Exception as e:
        res["patch"] = repr(e)
    w.wait()
    # dist.send waits inside python
    with M():
        if r == 0: dist.send(t, 1)
        else: dist.recv(t, 0)
        dist.reduce_scatter_tensor(torch.empty(512), t)
    res["wait_calls"] = len(calls)
    Work.wait = orig
    res["restored"] = Work.wait is orig
    return res

if __name__ == "__main__":
    print(mgpukit.launch(worker, 2, mode="cpu", echo=False))
