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
  A wait the recorder never sees (DDP's reducer waits on the bucket's future in C++) is
  caught by data dependency instead: the tensor a collective writes is *pending* until the
  collective ends, and the first compute op that touches it joins the streams first — what
  the stream-wait event after an NCCL kernel does on a GPU.

**The host and the device.** A profile carries `op_overhead` (seconds by `op_context`): the
host time eager PyTorch spends dispatching each op that is not a view — the Python module code
around it, autograd recording a node, the dispatcher, the kernel launch. Where it goes depends
on the profile:

- **CPU workers** (`this-machine`, `async_launch = false`): one core dispatches and then
  computes, so the overhead is *added* to every op's roofline time. That is what makes a small
  model on `this-machine` (a few hundred tiny ops per step) come out right; a calibrated
  profile measures it by context (~30 µs forward, ~11 µs backward, ~4 µs optimizer on the
  2-core dev host).
- **GPUs** (`async_launch = true`): each rank has a *host* clock that issues kernels and a
  *device* stream that runs them. An op costs the host its dispatch time; its kernel starts on
  the stream at `max(stream free, issued at)` and lasts `max(roofline, min_kernel_time)`. The
  host runs ahead of the device (kernels queue up) only while kernels are longer than their
  launches (big matmuls); a model of tiny kernels is *launch-bound* —
  its step is about `n_ops × dispatch`, the GPU idle most of the time (Meta's Holistic Trace
  Analysis: "the launch time on the CPU side is between 5-20 microseconds"; the figures and
  their sources are in `data/hardware/*.toml`). Collectives and messages are issued by the
  host too (`collective_launch`) and start on the communication stream once the compute
  stream's earlier kernels are done (NCCL's stream waits on the compute stream). Waits
  (`join`) hold the device stream, not the host — a GPU's stream-wait event — and `.item()`
  (`_local_scalar_dense`) or a step boundary (`sync`) makes the host wait for the device.
  CUDA graphs and `torch.compile` (mode "reduce-overhead") attack exactly the host part: one
  launch replays many kernels, and fusion makes fewer kernels.

Where the device time went is kept in `split` (virtual seconds, cumulative): `kernel` (the
stream busy), `launch_wait` (the stream idle, waiting for the host to issue), `wait` (the stream
idle, waiting for a collective, a message or data); they add up to the compute stream's time.
`host` is what the host spent dispatching and launching (on a CPU worker it is part of the
stream's time: `kernel + host + wait`). Waits inside a compute region are kept in `waits`
too, so the recorder draws them as waiting, not compute (DDP's wait for its last bucket inside
backward).

Nothing here reads a wall clock, so an emulated timeline is identical run after run, whatever
the host's load or core count.

What each op costs — its roofline, the bytes it moves, its context — is
`mgpukit.measure.op_cost`'s; this module keeps the time.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mgpukit.costmodel import comm as cost
from mgpukit.costmodel.hardware import HardwareProfile, load_profile
# the clock's price list; `mgpukit.calibrate` reads op_context, is_free and op_cost from here too
from mgpukit.measure.op_cost import is_free, is_host_scalar_op, is_model_code, op_context, op_cost
from mgpukit.measure.shape import storage_key

_aten = torch.ops.aten


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _storage_key(t: torch.Tensor) -> int | None:
    """The address of a tensor's storage (views share it); None for storage-less wrappers."""
    try:
        return storage_key(t.untyped_storage())  # shape mode: a fake storage's identity
    except (RuntimeError, NotImplementedError):
        return None


class _CostMode(TorchDispatchMode):
    """Runs each op for real and charges its roofline time to the clock's compute stream.

    While the clock is paused ops run uncharged; a c10d op run then (the recorder issuing a
    collective) marks the tensors it writes pending until the collective's end.
    """

    def __init__(self, clock: "VirtualClock"):
        super().__init__()
        self.clock = clock

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        clock = self.clock
        if clock._paused:
            out = func(*args, **(kwargs or {}))
            if func.namespace == "c10d" and clock._armed is not None:
                clock._mark_pending(args[0], clock._armed)  # c10d ops write their first argument
                clock._armed = None
            return out
        if clock._pending:
            clock._wait_for(args, kwargs)
        out = func(*args, **(kwargs or {}))
        if is_free(func):
            return out
        context = op_context(args, kwargs, func)
        if clock.launches and context == "no_grad" and is_host_scalar_op(args, kwargs):
            clock.run_host(clock.profile.host_scalar_op)  # a CPU scalar beside the GPU: no kernel, no sync
            return out
        seconds, flops, nbytes = op_cost(func, args, kwargs, out, clock.profile)
        clock.run_op(seconds, clock.profile.dispatch_overhead(context, model_code=is_model_code(func)))
        clock.flops += flops
        clock.bytes_moved += nbytes
        if func is _aten._local_scalar_dense.default:  # `.item()`: the host reads the result
            clock.sync()
        return out


class VirtualClock:
    """A rank's time on the profiled hardware (module docstring); a `measure.clock.Clock`."""

    emulated = True

    def __init__(self, profile: HardwareProfile, rank: int):
        self.profile = profile
        self.rank = rank
        self.compute = 0.0  # compute-stream time, virtual seconds (what `now()` reads)
        self.comm = 0.0  # communication-stream time
        self.launches = profile.async_launch  # a host issues kernels onto a device stream (GPUs)
        self._host = 0.0  # the issuing host's time (GPU profiles; a CPU worker's is `compute`)
        self.split = {"kernel": 0.0, "launch_wait": 0.0, "wait": 0.0, "host": 0.0}
        self.waits: list[tuple[float, float]] = []  # (start, end) of waits inside compute regions
        self.flops = 0.0
        self.bytes_moved = 0.0
        self._paused = False
        self._mode: _CostMode | None = None
        self._armed: float | None = None  # end of the collective being issued
        self._pending: dict[int, float] = {}  # storage address -> end of the collective writing it

    @classmethod
    def for_context(cls, ctx) -> "VirtualClock":
        return cls(load_profile(ctx.profile), ctx.rank)

    # ---- the hardware this rank computes on (hooks a lesson installs: `training/straggler.py`,
    # `training/hetero.py`); its links stay the launch profile's, so every rank prices a
    # collective the same way

    def slow_down(self, factor: float) -> None:
        """This rank computes `factor`× slower from now on: a straggler (`slowed_profile`)."""
        self.profile = slowed_profile(self.profile, factor)

    def compute_as(self, compute: HardwareProfile) -> None:
        """This rank computes as `compute` does (a mixed cluster), links unchanged (`compute_of`)."""
        self.profile = compute_of(self.profile, compute)

    def now(self) -> float:
        return self.compute

    def mark(self) -> float:
        """"Here": the virtual clock's time is already in stream order (`Clock.mark`)."""
        return self.compute

    @property
    def host(self) -> float:
        """When the host can issue its next op (on a CPU worker: the compute stream's time)."""
        return self._host if self.launches else self.compute

    def run_op(self, kernel: float, dispatch: float) -> None:
        """Charge one op: `dispatch` seconds of host time to issue it, `kernel` seconds of
        device time to run it (see the module docstring: added on a CPU worker, streamed on a
        GPU)."""
        self.split["host"] += dispatch
        if not self.launches:
            self.compute += dispatch + kernel
            self.split["kernel"] += kernel
            return
        kernel = max(kernel, self.profile.min_kernel_time)
        self._host += dispatch
        start = max(self.compute, self._host)  # the stream is free, and the kernel was issued
        self.split["launch_wait"] += start - self.compute
        self.split["kernel"] += kernel
        self.compute = start + kernel

    def run_host(self, seconds: float) -> None:
        """Host work that issues no kernel (GPU profiles: an op on a CPU scalar)."""
        self.split["host"] += seconds
        self._host += seconds

    def sync(self) -> None:
        """The host waits for the device (`torch.cuda.synchronize`, `.item()`, a step's end);
        the device then waits for whatever the host issues next. Nothing to do on CPU workers."""
        if self.launches:
            t = max(self._host, self.compute)
            self.split["launch_wait"] += t - self.compute
            self._host = self.compute = t

    def join(self, t: float, *, record: bool = True, host: bool = False) -> None:
        """The compute stream waits for something that ends at `t` (a `wait()`, a recv, a
        collective's output). On a GPU the host does not block (a stream-wait event) unless
        `host` (it needs the thing itself: the input pipeline's next batch). Inside a compute
        region the wait is kept in `waits` (`record=False`: the region is itself the waiting,
        e.g. the input pipeline's "data")."""
        if host and self.launches:
            self._host = max(self._host, t)
        if t > self.compute:
            self.split["wait"] += t - self.compute
            if record and self._mode is not None and not self._paused:
                self.waits.append((self.compute, t))
            self.compute = t
        if self._pending:  # whatever has ended by now is no longer pending
            self._pending = {k: end for k, end in self._pending.items() if end > self.compute}

    def _mark_pending(self, written, end: float) -> None:
        for t in _tensors(written):
            key = _storage_key(t)
            if key:
                self._pending[key] = end

    def _wait_for(self, args, kwargs) -> None:
        """An op touches a tensor a collective is still writing: compute waits for its end."""
        for t in _tensors((args, kwargs)):
            end = self._pending.get(_storage_key(t))
            if end is not None:
                self.join(end)

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
            yield
        finally:
            self._paused = was
            self._armed = None

    # ---- communication ---------------------------------------------------------------
    def collective(self, name: str, nbytes: int, ranks: list[int], group) -> tuple[float, float]:
        """(start, end) of a collective: the latest participant's ready time + its cost."""
        # emulated workers are CPU workers over gloo: these tensors are on the CPU by design
        ready = torch.tensor([self._launch_comm()], dtype=torch.float64, device="cpu")
        every = [torch.zeros(1, dtype=torch.float64, device="cpu") for _ in ranks]
        dist.all_gather(every, ready, group=group)
        start = max(float(t.item()) for t in every)
        end = start + collective_time(name, nbytes, ranks, self.profile)
        self.comm = end
        self._armed = end  # the c10d op issued next (same paused block) writes until `end`
        return start, end

    def send_times(self, nbytes: int, dst: int) -> tuple[float, float]:
        """(start, arrival) of a message to global rank `dst`, sent on the comm stream."""
        start = self._launch_comm()
        arrival = start + cost.p2p_time(nbytes, cost.link_for_ranks([self.rank, dst], self.profile))
        self.comm = arrival
        return start, arrival

    def _launch_comm(self) -> float:
        """The host issues a collective or a message; it can start once it is issued, the
        compute stream's earlier kernels are done and the communication stream is free."""
        if self.launches:
            self._host += self.profile.collective_launch
            self.split["host"] += self.profile.collective_launch
        return max(self.host, self.compute, self.comm)

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
    if name == "all_to_all":
        return cost.alltoall_time(nbytes, n, link)
    if name == "barrier":
        return cost.allreduce_time(0, n, link)
    raise ValueError(f"no cost formula for collective {name!r}")


def slowed_profile(p: HardwareProfile, factor: float) -> HardwareProfile:
    """`p` computing `factor`× slower: peak FLOP/s and memory bandwidth ÷ factor, and — the host
    that issues its ops is as slow (a noisy neighbour, a throttled node) — the per-op dispatch,
    the minimum kernel time and each GEMM's fixed latency × factor, so every op of the rank,
    launch-bound or not, takes `factor`× longer. Links unchanged."""
    peak = dataclasses.replace(p.peak_flops, **{d: getattr(p.peak_flops, d) / factor
                                                for d in ("fp32", "tf32", "bf16", "fp16", "fp8")
                                                if getattr(p.peak_flops, d) is not None})
    return dataclasses.replace(
        p, peak_flops=peak, memory_bandwidth=p.memory_bandwidth / factor,
        op_overhead=p.op_overhead * factor, min_kernel_time=p.min_kernel_time * factor,
        op_overhead_by_context={c: v * factor for c, v in p.op_overhead_by_context.items()}
        if p.op_overhead_by_context else None, gemm=_slower_gemm(p.gemm, factor))


def _slower_gemm(gemm, factor: float):
    """The ``[gemm]`` table with its fixed per-kernel latency (and its fp32 and fp8 sub-tables') ×
    ``factor``: a latency-bound GEMM or attention kernel — most of gpt-tiny's — is as slow as the
    rest. Rates need no change: they scale with the peak FLOP/s already divided."""
    if gemm is None:
        return None
    return dataclasses.replace(gemm, latency=gemm.latency * factor, fp32=_slower_gemm(gemm.fp32, factor),
                               fp8=_slower_gemm(gemm.fp8, factor))


def compute_of(base: HardwareProfile, compute: HardwareProfile) -> HardwareProfile:
    """`base`'s links, node size and host (dispatch and launch costs: the same hosts drive
    both kinds of GPU) with `compute`'s FLOP/s, GEMM table and memory bandwidth."""
    return dataclasses.replace(
        base, name=f"{compute.name} (links of {base.name})", peak_flops=compute.peak_flops,
        memory_bandwidth=compute.memory_bandwidth, compute_efficiency=compute.compute_efficiency,
        gemm=compute.gemm)
