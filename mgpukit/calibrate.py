"""`mgpukit calibrate`: measure this host, so that `this-machine` emulation predicts measured runs.

The emulator (`mgpukit.measure.vclock`) needs a few figures about the "device" it emulates;
on this host a device is one CPU worker process. They are measured the way a run will use them —
inside `workers` launched workers, all measuring *at the same time*, so they share cores and
memory bandwidth exactly as the workers of a real run do, each with the thread count it will
have (cores // workers: 1 thread per worker for 2 workers on 2 cores):

- **matmul FLOP/s** (fp32, bf16, fp16): median time of square matmuls. This is achieved
  throughput, not a datasheet peak, so the profile's `compute_efficiency` is 1.0.
- **per-op overhead**: a training step (forward, backward, SGD) of a GPT too small to compute
  anything (width 8, 8 tokens), timed phase by phase and divided by the ops each dispatches —
  the dispatcher, autograd and Python cost that a small model pays hundreds of times per step.
  It is kept per context (`vclock.op_context`): a forward op costs about three times a
  backward one (the Python of the modules around it, autograd recording a node) and an
  optimizer update less still; one average would make forward too fast and updates too slow.
- **memory bandwidth**, as the roofline uses it: the rate the memory-bound ops (layer norm,
  GELU, adds, the optimizer's updates) of a small transformer's training step really reach. A
  width-96 GPT step is timed; its matmuls (``flops / FLOP/s``) and its ops' overhead are taken
  out; the rest is the time of the bytes its FLOP-free ops move. On a CPU this is far below a
  streaming copy (normalisations and GELU compute per byte, small tensors stream badly), and a
  streaming figure would make every small model look 2-3x too fast; the streaming rate of an
  in-place add over arrays larger than the caches is measured too, printed for reference, and
  used if the step leaves no time to attribute.
- **gloo alpha and beta**: all-reduce of 1 KB … 16 MB between the workers, each right after
  a burst of compute as in a training step, fitted by least squares (relative errors weighted
  equally, so small messages pin alpha and large ones beta) to the ring formula the emulator
  charges, ``t = 2(n-1)·α + 2(n-1)/n · B/β``.

The profile is written to ``~/.cache/mgpukit/hardware/this-machine.toml`` (where
`load_profile("this-machine")` looks first) or to ``out``, and returned.
"""
from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from mgpukit.costmodel.comm import allreduce_time, fit_alpha_beta, ring_link
from mgpukit.costmodel.hardware import (HardwareProfile, OP_CONTEXTS, PeakFlops, THIS_MACHINE, load_profile,
                                        profile_toml, user_profile_dir)
from mgpukit.files import check_output, write_text
from mgpukit.measure.vclock import is_free, op_context, op_cost
from mgpukit.models import GPT, gpt_tiny, lm_loss
from mgpukit.runtime.hardware import usable_cores
from mgpukit.runtime.launcher import OversubscribedWarning, launch

SIZES = (2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24)  # all-reduce bytes, 1 KB … 16 MB
QUICK_SIZES = (2**10, 2**14, 2**18, 2**20, 2**22)


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up: allocations, first-touch of pages, kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_matmul(dtype: torch.dtype = torch.float32, *, n: int = 512, repeats: int = 5) -> float:
    """Achieved FLOP/s of an ``n × n`` by ``n × n`` matmul (``2n³`` FLOPs) on this thread count."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return 2 * n**3 / _median_time(lambda: a @ b, repeats)


def measure_memory_bandwidth(*, numel: int = 2**23, repeats: int = 5) -> float:
    """Bytes/s of ``x.add_(y)`` over two arrays of ``numel`` fp32 (32 MiB each by default)."""
    x, y = torch.ones(numel), torch.ones(numel)
    return 3 * 4 * numel / _median_time(lambda: x.add_(y), repeats)


def census(fn) -> dict:
    """What `fn` dispatches, counted as the virtual clock counts it: ``ops`` (views are free),
    ``ops_by_context`` (`mgpukit.measure.vclock.op_context`), ``flops`` and ``memory_bytes``
    (bytes moved by the ops that do no FLOPs)."""
    reference = load_profile("h100-nvlink")  # only FLOPs and bytes are read, not its rates
    out = {"ops": 0, "ops_by_context": dict.fromkeys(OP_CONTEXTS, 0), "flops": 0.0, "memory_bytes": 0.0}

    class Census(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            context = op_context(args, kwargs, func)  # before the op runs, as the clock sees it
            result = func(*args, **(kwargs or {}))
            if not is_free(func):
                _, flops, nbytes = op_cost(func, args, kwargs, result, reference)
                out["ops"] += 1
                out["ops_by_context"][context] += 1
                out["flops"] += flops
                out["memory_bytes"] += nbytes if flops == 0 else 0.0
            return result

    with Census():
        fn()
    return out


def _gpt_step(batch: int, **sizes):
    """The phases of a training step of a GPT of `sizes`: forward (to the loss), backward,
    and the optimizer (SGD with momentum, then zeroing the gradients), as three callables."""
    model = GPT(gpt_tiny(**sizes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    idx = torch.zeros(batch, model.cfg.seq_len, dtype=torch.long)
    held = {}

    def forward():
        held["loss"] = lm_loss(model(idx), idx)

    def backward():
        held.pop("loss").backward()

    def update():
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    for phase in (forward, backward, update):  # creates the gradients and momentum buffers
        phase()
    return forward, backward, update


def _phase_times(phases, repeats: int) -> list[float]:
    """Median seconds of each phase, timed in order within whole steps."""
    times = [[] for _ in phases]
    for _ in range(repeats + 1):
        for i, phase in enumerate(phases):
            start = time.perf_counter()
            phase()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t[1:]) for t in times]


def measure_op_overhead(*, repeats: int = 7) -> dict[str, float]:
    """Seconds of host work per dispatched op, by `op_context`: the forward, backward and
    optimizer phases of a width-8 GPT's training step on 8 tokens (no arithmetic to speak of)
    are timed, and ``time(phase) = Σ ops(phase, context) · overhead(context)`` is solved for
    the three overheads. ``"all"``: the whole step's time over all its ops."""
    phases = _gpt_step(1, seq_len=8, n_layer=2, n_head=2, d_model=8, d_ff=32)
    times = _phase_times(phases, repeats)
    counts = [census(phase) for phase in phases]  # in order: forward leaves the loss backward uses
    rows = torch.tensor([[c["ops_by_context"][k] for k in OP_CONTEXTS] for c in counts], dtype=torch.float64)
    solved = torch.linalg.lstsq(rows, torch.tensor(times, dtype=torch.float64)[:, None]).solution.squeeze(1)
    if (solved <= 0).any():  # noise made it unphysical: each phase's time over its own ops
        solved = torch.tensor([t / max(1, c["ops"]) for t, c in zip(times, counts)], dtype=torch.float64)
    out = dict(zip(OP_CONTEXTS, solved.tolist()))
    out["all"] = sum(times) / sum(c["ops"] for c in counts)
    return out


def measure_step_bandwidth(flops_rate: float, overhead: dict[str, float], *, repeats: int = 7) -> float | None:
    """Bytes/s the memory-bound ops of a small transformer's training step really achieve:
    a width-96 GPT (3 layers, 4 × 48 tokens — not a shape the kit trains) is timed, the
    matmuls' ``flops / flops_rate`` and each op's dispatch overhead (by context) are taken
    out, and the rest is put down to the bytes of the ops without FLOPs. None if nothing is left."""
    phases = _gpt_step(4, seq_len=48, n_layer=3, n_head=4, d_model=96, d_ff=384)
    elapsed = sum(_phase_times(phases, repeats))
    counts = [census(phase) for phase in phases]
    dispatch = sum(n * overhead[k] for c in counts for k, n in c["ops_by_context"].items())
    rest = elapsed - dispatch - sum(c["flops"] for c in counts) / flops_rate
    moved = sum(c["memory_bytes"] for c in counts)
    return moved / rest if rest > 0 else None


def measure_allreduce(sizes, *, repeats: int, compute_first: bool = True) -> dict[int, float]:
    """Median seconds of one gloo all-reduce of each size (bytes); the ranks start together.

    Sizes take turns (1 KB, 16 KB, …, then again), so a slow spell of a shared host lands on
    all of them rather than on one. `compute_first`: about a millisecond of matmuls before each
    all-reduce, as in a training step where a collective follows backward — back to back, with
    hot caches and awake threads, gloo is 1.5-2x faster than what a run sees.
    """
    a = torch.randn(128, 128)
    buffers = {nbytes: torch.zeros(max(1, nbytes // 4)) for nbytes in sizes}
    for t in buffers.values():
        dist.all_reduce(t)  # warm-up: gloo sets up its buffers for this size
    times: dict[int, list[float]] = {nbytes: [] for nbytes in sizes}
    for _ in range(repeats):
        for nbytes, t in buffers.items():
            for _ in range(20 if compute_first else 0):
                a @ a
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times[nbytes].append(time.perf_counter() - start)
    return {nbytes: statistics.median(ts) for nbytes, ts in times.items()}


def _measure(sizes, quick: bool) -> dict:
    """Runs on every worker: compute and memory figures measured concurrently, then gloo."""
    reps = 5 if quick else 9
    dist.barrier()
    flops = {"fp32": statistics.median(measure_matmul(torch.float32, n=n, repeats=reps) for n in (256, 512))}
    flops["bf16"] = measure_matmul(torch.bfloat16, n=256, repeats=reps)
    flops["fp16"] = measure_matmul(torch.float16, n=256, repeats=2 if quick else 3)
    dist.barrier()
    streaming = measure_memory_bandwidth(repeats=reps)
    dist.barrier()
    overhead = measure_op_overhead(repeats=5 if quick else 15)
    dist.barrier()
    in_step = measure_step_bandwidth(flops["fp32"], overhead, repeats=5 if quick else 11)
    allreduce = measure_allreduce(sizes, repeats=7 if quick else 15)
    return {"flops": flops, "streaming_bandwidth": streaming, "step_bandwidth": in_step,
            "op_overhead": overhead, "allreduce": allreduce, "threads": torch.get_num_threads()}


def calibrate(*, workers: int = 2, sizes=None, quick: bool = False, out: str | Path | None = None,
              verbose: bool = True) -> HardwareProfile:
    """Measure this host with `workers` CPU workers, save the `this-machine` profile, return it.

    `out`: where to write the TOML (default ``~/.cache/mgpukit/hardware/this-machine.toml``);
    `sizes`: all-reduce sizes in bytes for the alpha-beta fit (default 1 KB … 16 MB).
    """
    if not isinstance(workers, int) or workers < 2:
        raise ValueError(f"workers={workers!r}: calibrate needs at least 2 workers to measure "
                         f"gloo's alpha and beta.")
    if out is not None:
        check_output(out, what="profile file (--out)")
    sizes = tuple(sizes or (QUICK_SIZES if quick else SIZES))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        ranks = launch(_measure, workers, sizes, quick, mode="cpu", echo=False, timeout_s=300)
    med = statistics.median
    flops = {k: med(r["flops"][k] for r in ranks) for k in ("fp32", "bf16", "fp16")}
    streaming = med(r["streaming_bandwidth"] for r in ranks)
    in_step = [r["step_bandwidth"] for r in ranks if r["step_bandwidth"]]
    bandwidth = med(in_step) if in_step else streaming
    overhead = med(r["op_overhead"]["all"] for r in ranks)
    by_context = {k: med(r["op_overhead"][k] for r in ranks) for k in OP_CONTEXTS}
    times = {b: max(r["allreduce"][b] for r in ranks) for b in sizes}  # a collective ends on its last rank
    link = ring_link(fit_alpha_beta(list(times), list(times.values())), workers)
    alpha, beta = link.alpha, link.beta
    threads = ranks[0]["threads"]
    fields = dict(
        name=THIS_MACHINE,
        description=(f"measured by `mgpukit calibrate`: {workers} CPU workers x {threads} thread(s), "
                     f"gloo over loopback; one device = one worker"),
        peak_flops=PeakFlops(fp32=flops["fp32"], tf32=flops["fp32"], bf16=flops["bf16"], fp16=flops["fp16"]),
        memory_bytes=float(psutil.virtual_memory().total // max(workers, usable_cores())),
        memory_bandwidth=bandwidth,
        gpus_per_node=max(workers, usable_cores()),
        intra_node=link,
        inter_node=link,  # one host: there is no other link
        compute_efficiency=1.0,  # the FLOP/s above are achieved rates already
        usable_memory=0.9,
    )
    profile = HardwareProfile(**fields, op_overhead=overhead, op_overhead_by_context=by_context)
    path = Path(out) if out is not None else user_profile_dir() / f"{THIS_MACHINE}.toml"
    fit = [(b, t, allreduce_time(b, workers, link)) for b, t in times.items()]
    worst = max(abs(p - t) / t for _, t, p in fit)
    write_text(path, profile_toml(profile, comment=(  # atomic: a crash keeps the old profile
        f"Measured on this host by `mgpukit calibrate{' --quick' if quick else ''}` at "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {workers} workers x {threads} thread(s), measuring at once.\n"
        f"peak_flops: median of square fp32 matmuls (256, 512), bf16/fp16 at 256 — achieved, not datasheet.\n"
        f"op_overhead: training step of a width-8 GPT / ops it dispatches; by context: its forward, "
        f"backward and optimizer phases solved for the overhead of each.\n"
        f"memory_bandwidth: effective rate of the FLOP-free ops of a width-96 GPT training step "
        f"(streaming add over arrays larger than the caches: {streaming / 1e9:.1f} GB/s).\n"
        f"links: gloo all-reduce {_bytes(min(sizes))}..{_bytes(max(sizes))}, least-squares fit of "
        f"2(n-1)a + 2(n-1)/n B/b (worst relative residual {worst:.0%}).")))
    if verbose:
        print(f"this-machine (measured: {workers} workers x {threads} thread(s), measuring at once)")
        print(f"  matmul        fp32 {flops['fp32'] / 1e9:7.1f} GFLOP/s   bf16 {flops['bf16'] / 1e9:7.1f}   "
              f"fp16 {flops['fp16'] / 1e9:7.1f}")
        print(f"  per-op        {overhead * 1e6:7.2f} us of dispatch overhead (width-8 GPT training step / its ops): "
              + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in by_context.items()))
        print(f"  memory        {bandwidth / 1e9:7.1f} GB/s for the memory-bound ops of a training step "
              f"(streaming add beyond the caches: {streaming / 1e9:.1f} GB/s)")
        print(f"  gloo link     alpha {alpha * 1e6:7.1f} us   beta {beta / 1e9:6.3f} GB/s "
              f"(all-reduce fit, worst residual {worst:.0%})")
        for b, t, p in fit:
            print(f"    all-reduce {_bytes(b):>7}: measured {t * 1e3:8.3f} ms   fit {p * 1e3:8.3f} ms")
        print(f"  saved to {path}")
    return profile


def _bytes(n: float) -> str:
    for unit, size in (("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def register(subparsers):
    """Add ``calibrate`` to the ``mgpukit`` command line."""
    p = subparsers.add_parser("calibrate", help="measure this host and save the `this-machine` profile",
                              description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a few seconds)")
    p.add_argument("--workers", type=int, default=2, help="CPU workers measuring at once (default 2)")
    p.add_argument("--out", metavar="PATH", default=None,
                   help=f"where to write the profile (default {user_profile_dir() / 'this-machine.toml'}; "
                        f"on a GPU {user_profile_dir() / 'this-gpu.toml'})")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: the GPU when there is one (GEMMs and attention by shape, copy bandwidth, host cost "
                        "per op, a launch-bound step: profile this-gpu), else this host's CPU workers (this-machine)")
    p.set_defaults(func=_calibrate_command)
    return p


def _calibrate_command(args) -> int:
    gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if gpu:
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is visible here; use --device cpu (or auto).")
        from mgpukit.calibrate_gpu import calibrate_device  # lazy: the CLI's start-up; only a GPU run needs it

        calibrate_device("cuda", quick=args.quick, out=args.out)
        return 0
    calibrate(workers=args.workers, quick=args.quick, out=args.out)
    return 0
