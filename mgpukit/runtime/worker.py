"""The worker side of `mgpukit.runtime.launcher.launch`: what each forked process runs.

`_worker_main` joins the parent's rendezvous store (the port arrives through a pipe), sends its
prints to a log file the parent replays, sets up Accelerate's `PartialState` (CPU workers:
`cpu=True`, checked) and the launch's `DeviceMesh`, makes the `WorkerContext` current, calls
the user's function, and returns its value as CPU tensors the parent can unpickle — after a
store barrier, so no rank tears its process group down under a slower peer. A failure is
written into the store with a timestamp first, so the parent can name the root cause.
"""
from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import os
import pickle
import signal
import sys
import time
import traceback
from collections import OrderedDict
from typing import Any

import torch
import torch.distributed as dist

from mgpukit.runtime import context as _context
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.failures import ERROR_KEY, ONE_LINE_KEY, LaunchError
from mgpukit.runtime.lifeline import die_with_parent
from mgpukit.runtime.nodes import NodeLayout

_FINISHED_KEY = "mgpukit/finished/{rank}"  # fn returned; waiting for the others to return too
BAD_FORK = ("CUDA was initialised in the parent before fork; restart the kernel and keep CUDA "
            "calls inside the launched function.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """What every worker needs to set itself up (sent by fork, never pickled)."""

    world_size: int
    mode: str  # "cpu" | "gpu" | "emulated"
    profile: str | None
    threads: int
    timeout_s: float
    collective_timeout_s: float  # a collective waiting longer than this raises in its rank
    t0: float  # time.perf_counter() in the parent at launch: timelines start here
    log_dir: str  # each rank writes what it prints to <log_dir>/<rank>.log
    host: str  # where the rendezvous store listens (loopback unless asked otherwise)
    options: dict
    dims: ParallelDims  # the mesh every worker builds: (pp, dp, tp)
    nodes: NodeLayout  # which node each rank is on (emulated: the profile's gpus_per_node)
    layout: Any = None  # the run's resolved Layout, carried into every context (`ctx.layout`)
    takes_context: bool = False  # call `fn(ctx, *args)`: the context as an argument, not a global
    parent_pid: int = dataclasses.field(default_factory=os.getpid)  # the launching process


def _worker_main(fn, args, kwargs, spec: WorkerSpec, port_read: int):
    """Runs in each forked worker: set up Accelerate + torch.distributed, run `fn`, tear down."""
    rank = int(os.environ["RANK"])
    die_with_parent(spec.parent_pid)  # first: a parent killed from now on takes this worker along
    # A worker inherits elastic's handlers, which turn SIGTERM into a Python exception that a
    # rank blocked inside a gloo call never gets to raise. The parent owns shutdown: SIGTERM
    # ends a worker at once, and Ctrl-C (SIGINT, sent to the whole terminal's process group)
    # is the parent's to act on — it ends the workers itself.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec.options.get("debug_collectives"):
        dist.set_debug_level_from_env()  # torch read the level at import, before the fork
    _capture_output(spec.log_dir, rank)
    os.environ["MASTER_PORT"] = str(int(os.read(port_read, 8)))
    os.close(port_read)
    store = dist.TCPStore(spec.host, int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=spec.timeout_s))

    def report_failure():
        # Timestamped in the store, so the parent can tell the first failure from the peers
        # that failed because of it (the elastic error files only keep whole seconds). Written
        # before the process group is torn down, since tearing it down wakes the peers.
        exc = sys.exc_info()[1]
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int):  # stopped on purpose: the message is the news (failures.py)
            store.set(ONE_LINE_KEY.format(rank=rank), f"{code}\n{exc}")
        store.set(ERROR_KEY.format(rank=rank), f"{time.time_ns()}\n{traceback.format_exc()}")

    return _run_in_worker(fn, args, kwargs, spec, rank, report_failure, store)


def check_picklable(value, where: str = "the return value") -> None:
    """Raise TypeError naming the part of `value` that cannot be pickled, and its type.

    A worker's return value reaches the parent pickled; torch pickles it after the function
    returned, where a failure only reads "the process ended without raising an exception"."""
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return
    except Exception as e:
        error = e
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, (list, tuple)) else ())
    for key, item in items:
        check_picklable(item, f"{where}[{key!r}]")  # raises for the first bad part, deepest first
    raise TypeError(f"{where} could not be pickled to send it back to the parent: "
                    f"{type(value).__module__}.{type(value).__qualname__} ({error}). Return plain "
                    f"data — numbers, strings, lists, dicts, tensors — not functions, locks, "
                    f"open files or modules.")


def _to_cpu(value):
    """`value` with every tensor inside dicts, lists and tuples moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.detach().cpu()
    if isinstance(value, dict):
        out = {k: _to_cpu(v) for k, v in value.items()}
        return type(value)(out) if type(value) in (dict, OrderedDict) else out
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_to_cpu(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _run_in_worker(fn, args, kwargs, spec: WorkerSpec, rank: int, report_failure, store):
    try:
        if spec.mode == "gpu" and torch.cuda._is_in_bad_fork():  # before Accelerate touches CUDA
            raise LaunchError(BAD_FORK)
        # tensors cross to the parent by pickling: CUDA ones would need CUDA in the parent (the
        # very thing a notebook must not initialise), so they come back as CPU copies
        value = _to_cpu(_setup_and_call(fn, args, kwargs, spec, rank))
        check_picklable(value)  # here, where a failure is reported with its cause
        # Leave together: a rank that tore its process group down while a slower peer was
        # still connecting would fail that peer. A store barrier, not a collective, so it can
        # never pair up with a collective some rank is still (wrongly) waiting in.
        store.set(_FINISHED_KEY.format(rank=rank), "1")
        store.wait([_FINISHED_KEY.format(rank=r) for r in range(spec.world_size)])
        return value
    except BaseException:
        report_failure()
        raise
    finally:
        _context.set_current(None)
        if dist.is_initialized():
            dist.destroy_process_group()


def _setup_and_call(fn, args, kwargs, spec: WorkerSpec, rank: int):
    # lazy: start-up (accelerate ~0.1 s: loaded where a run uses it, not on import)
    from accelerate import PartialState

    torch.set_num_threads(spec.threads)
    timeout = datetime.timedelta(seconds=spec.collective_timeout_s)
    state = PartialState(cpu=spec.mode != "gpu", timeout=timeout)
    if state.num_processes != spec.world_size or state.process_index != rank:
        raise LaunchError(
            f"Accelerate reports process {state.process_index} of {state.num_processes} "
            f"({state.distributed_type}) on rank {rank} of {spec.world_size}: the workers are not "
            f"one group. (On CPU this is the cpu=True trap; mgpukit sets it — is another "
            f"PartialState already alive in this process?)"
        )
    torch.set_num_threads(spec.threads)  # Accelerate may have set its own count
    ctx = _context.worker_context(
        rank=rank, world_size=spec.world_size, mode=spec.mode, profile=spec.profile,
        device=state.device, t0=spec.t0, threads=spec.threads, options=spec.options,
        dims=spec.dims, layout=spec.layout, nodes=spec.nodes,
    )
    if spec.takes_context:  # the library's own workers: the context is their first argument
        return fn(ctx, *args, **kwargs)
    _context.set_current(ctx)  # a user's function asks `mgpukit.current()`
    return fn(*args, **kwargs)


def _capture_output(log_dir: str, rank: int) -> None:
    """Send this worker's prints to a file the parent echoes (prefixed by rank) afterwards.

    Python-level streams are swapped, and file descriptors 1 and 2 follow where they exist, so
    C-level output lands there too. A forked child cannot write into a notebook's output area
    or pytest's capture objects, which is why the parent replays it.
    """
    log = open(os.path.join(log_dir, f"{rank}.log"), "w", buffering=1)
    for fd in (1, 2):
        try:
            os.dup2(log.fileno(), fd)
        except OSError:
            pass
    sys.stdout = sys.stderr = log
    # a native crash (segfault, a C++ abort in gloo) dumps the Python stacks into the same file,
    # not wherever the parent's fault handler pointed (pytest, a notebook's kernel)
    faulthandler.enable(file=log, all_threads=True)
