"""Research: can a dispatch mode reach the Work of a c10d op and hook its future (completion time)?"""
import time, threading
import torch, torch.distributed as dist
import mgpukit
from torch.utils._python_dispatch import TorchDispatchMode
from torch._C._distributed_c10d import Work


class Hook(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.log = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        if func.namespace == "c10d":
            boxed = out[1] if isinstance(out, (tuple, list)) else out
            try:
                work = Work.unbox(boxed)
                fut = work.get_future()
                name = str(func)
                log = self.log
                def cb(f, name=name, t0=t0):
                    log.append((name, "done", time.perf_counter() - t0, threading.current_thread().name))
                fut.then(cb)
                self.log.append((name, "hooked", type(work).__name__))
            except Exception as e:
                self.log.append((str(func), "ERR", repr(e)[:150]))
        return out


def worker():
    r = dist.get_rank()
    big = torch.ones(4 << 20)  # 16 MiB
    h = Hook()
    with h:
        dist.all_reduce(big)
        t = time.perf_counter(); w = dist.all_reduce(big, async_op=True)
    issue = time.perf_counter() - t
    w.wait(); waited = time.perf_counter() - t
    time.sleep(0.05)
    with h:
        if r == 0: dist.send(big, 1)
        else: dist.recv(big, 0)
        ops = [dist.P2POp(dist.isend, big, 1 - r), dist.P2POp(dist.irecv, torch.empty_like(big), 1 - r)]
        for x in dist.batch_isend_irecv(ops): x.wait()
        dist.all_gather_into_tensor(torch.empty(2 * big.numel()), big)
        dist.reduce_scatter_tensor(torch.empty(big.numel() // 2), big)
        dist.barrier()
    time.sleep(0.1)
    return h.log, (issue, waited)

if __name__ == "__main__":
    out = mgpukit.launch(worker, 2, mode="cpu", echo=False)
    for r, (log, t) in enumerate(out):
        print("rank", r, "async issue/wait s", t)
        for x in log: print("  ", x)
