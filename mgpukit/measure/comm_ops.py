"""Which dispatcher ops are communication, and what each one moves: the tables `CommObserver` reads.

Every collective and point-to-point call reaches the PyTorch dispatcher as an op of one of two
families (`mgpukit.measure.observe` explains how the observer sees them):

- the **c10d** ops a ``ProcessGroup`` call dispatches, from Python (``dist.all_reduce`` is
  ``c10d.allreduce_``) or from C++ (DDP's reducer): `C10D`; their process-group argument is a
  boxed ``ProcessGroup``;
- the **functional** collectives (``_c10d_functional.*``, DTensor's redistributions), whose
  result is a new tensor finished by ``wait_tensor``: `FUNCTIONAL`; their group argument is a
  group name.

Each entry says, in the recorder's words, which collective it is (``all_reduce``,
``all_gather``, ``reduce_scatter``, ``broadcast``, ``barrier``, ``send``, ``recv``,
``all_to_all``, …), which tensors are its payload (all-reduce: the tensor; all-gather: the
gathered output; reduce-scatter: the full input), which tensors it writes, and where its group
argument is. `bus_fraction` turns a payload into the ring's "bus bytes" per rank; `COST_AS` names
the collective whose formula an op without one of its own is charged by; `payload_bytes` sums
the bytes of the tensors in an op's arguments.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

_c10d = torch.ops.c10d
_fc = torch.ops._c10d_functional
_fca = torch.ops._c10d_functional_autograd


def _t(i):
    return lambda args, out: args[i]


# op -> (kind, payload tensors(args, out), written tensors(args, out), process-group arg index)
# non-functional c10d ops: args[pg] is a boxed ProcessGroup; functional ones: a group name.
C10D = {
    _c10d.allreduce_.default: ("all_reduce", _t(0), _t(0), 1),
    _c10d.allreduce_coalesced_.default: ("all_reduce", _t(0), _t(0), 1),
    _c10d.broadcast_.default: ("broadcast", _t(0), _t(0), 1),
    _c10d.allgather_.default: ("all_gather", _t(0), _t(0), 2),
    _c10d._allgather_base_.default: ("all_gather", _t(0), _t(0), 2),
    _c10d.allgather_into_tensor_coalesced_.default: ("all_gather", _t(0), _t(0), 2),
    _c10d.allgather_coalesced_.default: ("all_gather", _t(0), _t(0), 2),
    _c10d.reduce_scatter_.default: ("reduce_scatter", _t(1), _t(0), 2),
    _c10d._reduce_scatter_base_.default: ("reduce_scatter", _t(1), _t(0), 2),
    _c10d.reduce_scatter_tensor_coalesced_.default: ("reduce_scatter", _t(1), _t(0), 2),
    _c10d.alltoall_.default: ("all_to_all", _t(1), _t(0), 2),
    _c10d.alltoall_base_.default: ("all_to_all", _t(1), _t(0), 2),
    _c10d.reduce_.default: ("reduce", _t(0), _t(0), 1),
    _c10d.gather_.default: ("gather", _t(1), _t(0), 2),
    _c10d.scatter_.default: ("scatter", _t(0), _t(0), 2),
    _c10d.barrier.default: ("barrier", lambda a, o: (), lambda a, o: (), 1),
    _c10d.send.default: ("send", _t(0), lambda a, o: (), 1),
    _c10d.recv_.default: ("recv", _t(0), _t(0), 1),
    _c10d.recv_any_source_.default: ("recv", _t(0), _t(0), 1),
}
_out = (lambda args, out: out)
_gathered = (lambda args, out: [args[0]] * args[1])  # input x group_size, before the op runs
FUNCTIONAL = {
    _fc.all_reduce.default: ("all_reduce", _t(0), _out, 2),
    _fc.all_reduce_.default: ("all_reduce", _t(0), _t(0), 2),
    _fc.all_reduce_coalesced.default: ("all_reduce", _t(0), _out, 2),
    _fc.all_reduce_coalesced_.default: ("all_reduce", _t(0), _t(0), 2),
    _fc.all_gather_into_tensor.default: ("all_gather", _gathered, _out, 2),
    _fc.all_gather_into_tensor_out.default: ("all_gather", _gathered, _out, 2),
    _fc.all_gather_into_tensor_coalesced.default: ("all_gather", _gathered, _out, 2),
    _fca.all_gather_into_tensor.default: ("all_gather", _gathered, _out, 2),
    _fc.reduce_scatter_tensor.default: ("reduce_scatter", _t(0), _out, 3),
    _fc.reduce_scatter_tensor_coalesced.default: ("reduce_scatter", _t(0), _out, 3),
    _fca.reduce_scatter_tensor.default: ("reduce_scatter", _t(0), _out, 3),
    _fc.all_to_all_single.default: ("all_to_all", _t(0), _out, 3),
    _fca.all_to_all_single.default: ("all_to_all", _t(0), _out, 3),
    _fc.broadcast.default: ("broadcast", _t(0), _out, 2),
    _fc.broadcast_.default: ("broadcast", _t(0), _t(0), 2),
}
if hasattr(_fc, "reduce_scatter_tensor_out"):
    FUNCTIONAL[_fc.reduce_scatter_tensor_out.default] = ("reduce_scatter", _t(0), _out, 3)
WAIT_TENSOR = _fc.wait_tensor.default
RECV_ANY_SOURCE = _c10d.recv_any_source_.default  # no peer known: counted, never charged

# ops with no formula of their own in `vclock.collective_time`, charged as one that has
COST_AS = {"all_to_all": "all_gather", "gather": "all_gather", "scatter": "all_gather",
           "reduce": "all_reduce"}


def bus_fraction(name: str, n: int) -> float:
    """Ring bus bytes per rank as a fraction of the payload, for a group of `n` ranks:
    all-reduce 2(n-1)/n, a barrier nothing, every other collective (n-1)/n."""
    if name == "all_reduce":
        return 2 * (n - 1) / n
    return 0.0 if name == "barrier" else (n - 1) / n


def observed_ops() -> set:
    """Every op the observer counts (c10d and functional collectives, point-to-point)."""
    return set(C10D) | set(FUNCTIONAL)


def tensors_in(tree) -> list[torch.Tensor]:
    """The tensors in an op's arguments (nested lists, tuples, dicts)."""
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def payload_bytes(tree) -> int:
    """Bytes of every tensor in `tree`."""
    return sum(t.numel() * t.element_size() for t in tensors_in(tree))
