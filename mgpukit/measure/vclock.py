"""The virtual clock of emulated mode: what this program would take on the profiled hardware.

The program runs for real on CPU workers over gloo — real tensors, real gradients — but each
rank reads time from a clock it advances itself, from what it actually executed:

- **compute stream**: every aten op run inside `Recorder.compute(...)` advances it by its
  roofline time `max(flops / (peak · efficiency), bytes / memory_bandwidth)`. FLOPs come from
  torch's own formulas (`torch.utils.flop_counter.flop_registry`: matmuls, attention, convs);
  bytes are the op's input and output tensors (views move nothing).
- **communication stream**: a collective starts when its *latest* participant is ready (the
  ranks exchange their ready times over gloo — a tiny extra message that only carries time) and
  lasts its alpha-beta cost (`mgpukit.costmodel.comm`: ring all-reduce `2(n-1)/n·B/β +
  2(n-1)·α`, …). Collectives on one rank queue behind each other on this stream.
- **point-to-point**: a message carries its sender's timestamp; it arrives at
  `sent + α + B/β` and the receiver's compute clock becomes `max(own, arrival)`.
- **async**: an async collective runs on the communication stream while compute goes on;
  `wait()` joins the streams (`compute = max(compute, comm_end)`), so overlap is modelled.

Nothing here reads a wall clock, so an emulated timeline is identical run after run, whatever
the host's load or core count.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from mgpukit.costmodel import comm as cost
from mgpukit.costmodel.hardware import HardwareProfile, load_profile

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_FREE = {torch.ops.aten.detach.default, torch.ops.aten.empty_like.default,
         torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
         torch.ops.aten.zeros_like.default}


def op_cost(func, args, kwargs, out, profile: HardwareProfile) -> tuple[float, float, float]:
    """(seconds, flops, bytes) of one aten op on `profile` by the roofline model."""
    packet = func._overloadpacket
    if func in _FREE or getattr(func, "is_view", False) or func.namespace != "aten":
        return 0.0, 0.0, 0.0
    flops = 0.0
    if packet in flop_registry:
        flops = float(flop_registry[packet](*args, **(kwargs or {}), out_val=out))
    tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
    nbytes = float(sum(t.numel() * t.element_size() for t in tensors))
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    peak = profile.flops(_DTYPE_NAMES.get(dtype, "fp32")) * profile.compute_efficiency
    seconds = max(flops / peak, nbytes / profile.memory_bandwidth)
    return seconds, flops, nbytes


class _CostMode(TorchDispatchMode):
    """Runs each op for real and charges its roofline time to the clock's compute stream."""

    def __init__(self, clock: "VirtualClock"):
        super().__init__()
        self.clock = clock

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.clock._paused:
            seconds, flops, nbytes = op_cost(func, args, kwargs, out, self.clock.profile)
            self.clock.compute += seconds
            self.clock.flops += flops
            self.clock.bytes_moved += nbytes
        return out


class VirtualClock:
    emulated = True

    def __init__(self, profile: HardwareProfile, rank: int):
        self.profile = profile
        self.rank = rank
        self.compute = 0.0  # compute-stream time, virtual seconds
        self.comm = 0.0  # communication-stream time
        self.flops = 0.0
        self.bytes_moved = 0.0
        self._paused = False
        self._mode: _CostMode | None = None

    @classmethod
    def for_context(cls, ctx) -> "VirtualClock":
        return cls(load_profile(ctx.profile), ctx.rank)

    def now(self) -> float:
        return self.compute

    def join(self, t: float) -> None:
        """The compute stream waits for something that ends at `t` (a `wait()`, a recv)."""
        self.compute = max(self.compute, t)

    @contextlib.contextmanager
    def counting(self):
        """Charge every op run inside to the compute stream (re-entrant)."""
        if self._mode is not None:
            yield
            return
        self._mode = _CostMode(self)
        try:
            with self._mode:
                yield
        finally:
            self._mode = None

    @contextlib.contextmanager
    def paused(self):
        """Ops run here (collectives, timestamp exchange) are not compute."""
        was, self._paused = self._paused, True
        try:
            with _disable_current_modes():
                yield
        finally:
            self._paused = was

    # ---- communication ---------------------------------------------------------------
    def collective(self, name: str, nbytes: int, ranks: list[int], group) -> tuple[float, float]:
        """(start, end) of a collective: the latest participant's ready time + its cost."""
        ready = torch.tensor([max(self.compute, self.comm)], dtype=torch.float64)
        every = [torch.zeros(1, dtype=torch.float64) for _ in ranks]
        dist.all_gather(every, ready, group=group)
        start = max(float(t.item()) for t in every)
        end = start + collective_time(name, nbytes, ranks, self.profile)
        self.comm = end
        return start, end

    def send_times(self, nbytes: int, dst: int) -> tuple[float, float]:
        """(start, arrival) of a message to global rank `dst`, sent on the comm stream."""
        start = max(self.compute, self.comm)
        arrival = start + cost.p2p_time(nbytes, cost.link_for_ranks([self.rank, dst], self.profile))
        self.comm = arrival
        return start, arrival

    def arrival(self, sent_at: float, nbytes: int, src: int) -> float:
        return sent_at + cost.p2p_time(nbytes, cost.link_for_ranks([src, self.rank], self.profile))


def collective_time(name: str, nbytes: int, ranks: list[int], profile: HardwareProfile) -> float:
    """Alpha-beta cost of a collective over global `ranks` (the link is picked from their span)."""
    n = len(ranks)
    link = cost.link_for_ranks(ranks, profile)
    if name == "all_reduce":
        return cost.allreduce_time(nbytes, n, link)
    if name == "reduce_scatter":
        return cost.reduce_scatter_time(nbytes, n, link)
    if name == "all_gather":
        return cost.allgather_time(nbytes, n, link)
    if name == "broadcast":
        return cost.broadcast_time(nbytes, n, link)
    if name == "barrier":
        return cost.allreduce_time(0, n, link)
    raise ValueError(f"no cost formula for collective {name!r}")
