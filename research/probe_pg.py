"""Research: is the ProcessGroup unboxed from a c10d op (or resolved from a functional op's group
name) the same Python object torch.distributed registered, so get_process_group_ranks works?"""
import torch, torch.distributed as dist, torch.nn as nn
import mgpukit
from torch.utils._python_dispatch import TorchDispatchMode
from torch._C._distributed_c10d import ProcessGroup, _resolve_process_group

class M(TorchDispatchMode):
    def __init__(self): super().__init__(); self.res = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d" and func is not torch.ops.c10d.allgather_.default:
            pg = ProcessGroup.unbox(args[1] if func._schema.arguments[1].name == "process_group" else args[2])
            self.res.append((str(func), pg is dist.group.WORLD, dist.get_process_group_ranks(pg), pg.size(), pg.group_name))
        elif func is torch.ops._c10d_functional.all_reduce.default:
            pg = _resolve_process_group(args[2] if "all_reduce" in str(func) else args[-1])
            self.res.append((str(func), type(args[-1]).__name__, dist.get_process_group_ranks(pg), pg.size()))
        return func(*args, **(kwargs or {}))

def worker():
    from torch.distributed.device_mesh import init_device_mesh
    import torch.distributed._functional_collectives as fc
    m = M()
    sub = dist.new_group([0, 1])
    mesh = init_device_mesh("cpu", (2,))
    with m:
        dist.all_reduce(torch.ones(4))
        dist.all_reduce(torch.ones(4), group=sub)
        dist.all_reduce(torch.ones(4), group=mesh.get_group())
        fc.all_reduce(torch.ones(4), "sum", mesh.get_group()).wait()
    return m.res

print(mgpukit.launch(worker, 2, mode="cpu", echo=False)[1])
