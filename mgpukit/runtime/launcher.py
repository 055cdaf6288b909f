"""Launch N workers from a notebook, a script or a test, and get each rank's return value.

`launch(fn, world_size, *args)` forks `world_size` processes, forms one process group among
them (NCCL on GPUs, gloo on CPU workers), runs `fn(*args)` on every rank and returns the list
of return values, rank by rank. It is the elastic multiprocessing machinery that Accelerate's
`notebook_launcher` sits on (`torch.distributed.elastic.multiprocessing.start_processes`, fork
start method), with the four traps of that launcher closed:

1. **Silent replicas on CPU.** Without `cpu=True`, `Accelerator()` on CPU workers reports
   `DistributedType.NO` and rank 0 everywhere: N unsynchronised copies. Each worker here builds
   Accelerate's `PartialState(cpu=True)` first and checks that it reports the right rank and
   world size, so an `Accelerator()` made later inside `fn` shares that correct state.
2. **A fixed port, open to the network.** The parent opens the rendezvous store itself on a
   socket it bound to 127.0.0.1, port 0 (the kernel picks a free one), and workers join it as
   clients: two launches at once never collide, there is no window between "find a free port"
   and "bind it", and nobody else on the network can write the store's keys (`TCPStore`
   given only a host name listens on every interface, IPv4 and IPv6). Gloo's own sockets are
   pinned to the loopback interface too (`GLOO_SOCKET_IFNAME`, unless the caller set it).
3. **Errors and hangs.** A rank that raises ends the launch at once; the error names the rank
   and carries its traceback (the earliest failure is the root cause — a peer that died of a
   closed connection afterwards is listed, not blamed). A launch that runs past `timeout_s`
   (a collective some rank never joined) is ended with the ranks that never finished named.
   Either way every worker process, and anything it started, is gone when `launch` returns —
   and when the caller dies without returning (SIGKILL, SIGTERM, SIGHUP): `runtime/lifeline.py`.
4. **CUDA before fork.** A forked child cannot use CUDA once the parent initialised it; that is
   refused up front with a sentence saying what to do.
5. **What the parent left for the collector.** A forked worker inherits the parent's garbage
   not yet collected — e.g. the TCPStore server of an earlier launch that failed, kept alive by
   its exception's traceback — including C++ objects that own threads. Those threads do not
   exist in the child; if the child's collector frees such an object its destructor joins a
   dead thread: a hang, or, when the joining thread reuses the dead one's stack (glibc hands the
   parent's thread stacks to the child's new threads: same thread id), "Resource deadlock
   avoided" and SIGABRT — seen as a rare crash when the collector happened to run on gloo's
   thread. So every object a worker inherits is frozen (`gc.freeze`, right after the fork): the
   child's collector never looks at them.
"""
from __future__ import annotations

import datetime
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import psutil
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

from mgpukit.environment import check_environment
from mgpukit.limits import check_seconds, check_threads, check_workers
from mgpukit.runtime.dims import ParallelDims
from mgpukit.runtime.lifeline import LAUNCH_TAG, Reaper, kill_groups, kill_tagged, launch_tag, own_group
from mgpukit.runtime.watch import wait
from mgpukit.runtime.nodes import NodeLayout, for_profile
from mgpukit.runtime.fork_safety import _callers_signal_handlers, _freezing_inherited_objects, _release_openmp_threads
from mgpukit.runtime.failures import (LaunchError, LaunchTimeout, WorkerError, tail_logs,
                                      worker_error)

__all__ = ["launch", "resolve_mode", "build_mesh", "LaunchError", "LaunchTimeout", "WorkerError",
           "OversubscribedWarning"]
from mgpukit.runtime.hardware import usable_cores
from mgpukit.runtime.modes import MODES, ResolvedMode, resolve_mode  # noqa: F401  (in __all__)
from mgpukit.runtime.context import build_mesh  # noqa: F401  (in __all__)
from mgpukit.threads import worker_threads
from mgpukit.runtime.worker import (_FINISHED_KEY, BAD_FORK, WorkerSpec, _worker_main,  # noqa: F401
                                    check_picklable)

# CPU-side checks of the GPU path, off by default: environment switches so that a whole test run
# can turn them on; read once by `launch` in the parent, seen by workers as `ctx.options[key]`
_CHECK_SWITCHES = {"device_guard": "MGPUKIT_DEVICE_GUARD",  # measure/device_guard.py
                   "strict_p2p": "MGPUKIT_STRICT_P2P"}  # measure/p2p_strict.py


class OversubscribedWarning(UserWarning):
    """More CPU workers than cores: results stay correct, wall-clock speedups do not."""


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    mode: str = "auto",
    profile: str | None = None,
    timeout_s: float = 300.0,
    threads_per_worker: int | None = None,
    echo: bool = True,
    options: dict | None = None,
    dims: ParallelDims | None = None,
    layout: Any = None,
    host: str = "127.0.0.1",
    collective_timeout_s: float | None = None,
    debug_collectives: bool = False,
    takes_context: bool = False,
    **kwargs: Any,
) -> list[Any]:
    """Run `fn(*args, **kwargs)` on `world_size` workers; return each rank's value, by rank.

    mode: "auto" (GPUs with NCCL when enough are visible, else CPU workers with gloo), "cpu",
    "gpu", or "emulated" (CPU workers whose timings come from a virtual clock of `profile`).
    timeout_s: the whole launch's limit; a hung rank ends in `LaunchTimeout`, not a hang.
    collective_timeout_s: how long one collective may wait for its peers before it raises in
    its rank, naming the operation (default: `timeout_s`). Keep it well under `timeout_s` so a
    mismatch is reported by the rank that waits, not by the launch's clock.
    debug_collectives: run the workers with `TORCH_DISTRIBUTED_DEBUG=DETAIL`: every collective
    first compares its fingerprint (op, shapes, dtypes) across ranks, so ranks that call
    different collectives fail at once with "Detected mismatch between collectives" instead
    of hanging (an extra check per collective: for debugging, not for timing).
    echo: print what workers printed (prefixed by rank) once they finish.
    options: free-form settings handed to every worker's context (`mgpukit.current().options`).
    dims: how the workers are cut into (pp, dp, tp) — every worker's context carries the
    `DeviceMesh` built from it (`ctx.mesh`, `ctx.group("dp")`); default: all data parallel.
    layout: a run's resolved `Layout` (`mgpukit.prepare`), carried into every worker's context
    (`ctx.layout`); `dims` is then its mesh shape.
    takes_context: call `fn(ctx, *args, **kwargs)` with the worker's context as its first
    argument (the library's own workers: `experiment.run_rank`); otherwise `fn` asks
    `mgpukit.current()` (a function written in a notebook cell).
    host: the address the rendezvous store listens on — loopback by default, so nothing on
    the network can reach it; give another only when workers elsewhere must join.
    `device_guard` and `strict_p2p` in options (default: env MGPUKIT_DEVICE_GUARD /
    MGPUKIT_STRICT_P2P = 1) turn on the CPU checks of the GPU path.
    """
    if not callable(fn):
        raise LaunchError(f"fn={fn!r} is not callable; pass the function every worker runs.")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise LaunchError(f"world_size must be a positive integer, got {world_size!r}.")
    collective_timeout_s = timeout_s if collective_timeout_s is None else collective_timeout_s
    for name, value, kind in (("options", options, dict), ("host", host, str), ("dims", dims, ParallelDims)):
        if value is not None and not isinstance(value, kind):
            raise LaunchError(f"{name}={value!r}: give a {kind.__name__} (or leave it out).")
    try:  # the stated bounds (mgpukit.limits), before anything forks
        timeout_s = check_seconds("timeout_s", timeout_s)
        collective_timeout_s = check_seconds("collective_timeout_s", collective_timeout_s)
        check_threads("threads_per_worker", threads_per_worker)
    except ValueError as e:
        raise LaunchError(str(e)) from None
    collective_timeout_s = min(collective_timeout_s, timeout_s)
    dims = dims or ParallelDims(dp=world_size)
    if dims.world_size != world_size:
        raise LaunchError(f"dims {dims.as_dict()} describe {dims.world_size} workers, but "
                          f"world_size={world_size}; launch {dims.world_size} workers or change the degrees.")
    # a run's mode was resolved once, in `mgpukit.prepare` (`ResolvedMode`): taken as it is
    mode = mode if isinstance(mode, ResolvedMode) else resolve_mode(mode, world_size)
    if mode == "emulated" and not profile:
        raise LaunchError("mode='emulated' needs a hardware profile, e.g. profile='h100-nvlink'.")
    if mode == "gpu" and torch.cuda.is_initialized():
        raise LaunchError(f"{BAD_FORK} (This process already created a CUDA context — e.g. "
                          f"model.cuda(), torch.randn(device='cuda') or a torch.cuda.* query — and "
                          f"forked workers cannot use it.)")
    try:  # CPU workers (cpu, emulated) are processes of this machine: its memory bounds them
        check_workers(world_size, on_this_machine=mode != "gpu", memory_bytes=psutil.virtual_memory().total)
        check_environment(host=host)  # what torch / gloo would reject in every rank, after the fork
    except ValueError as e:
        raise LaunchError(str(e)) from None
    cores = usable_cores()
    if mode == "cpu" and world_size > cores:  # emulated timings don't depend on the cores
        warnings.warn(
            f"{world_size} CPU workers on {cores} cores: results stay correct, but measured "
            f"wall-clock speedups will be distorted (workers take turns on the cores). "
            f"Use mode='emulated' for hardware-faithful timings.",
            OversubscribedWarning,
            stacklevel=2,
        )
    # forked workers share this machine; emulated ones stand for GPUs placed as the profile says
    nodes = (for_profile(world_size, profile) if mode == "emulated"
             else NodeLayout(of_rank=(0,) * world_size, hosts=(socket.gethostname(),)))
    nodes.warn(dims)
    # 1 per worker when OpenMP spin-waits (torch imported before mgpukit): said in the record
    # (`record["threads"]["note"]`) and by `mgpukit info`, not as a warning a notebook would show
    threads, _ = worker_threads(world_size, threads_per_worker, cores=cores)
    options = dict(options or {})
    for key, var in _CHECK_SWITCHES.items():  # read once, here, and handed to every worker
        options.setdefault(key, os.environ.get(var) == "1")
    spec = WorkerSpec(
        world_size=world_size, mode=mode, profile=profile, threads=threads,
        timeout_s=timeout_s, collective_timeout_s=collective_timeout_s, t0=time.perf_counter(),
        options={**options, "debug_collectives": bool(debug_collectives)},
        log_dir=tempfile.mkdtemp(prefix="mgpukit-launch-"), dims=dims, host=host, nodes=nodes,
        layout=layout, takes_context=takes_context,
    )
    try:
        return _run(fn, args, kwargs, spec, echo=echo)
    finally:
        shutil.rmtree(spec.log_dir, ignore_errors=True)


def _run(fn, args, kwargs, spec: WorkerSpec, *, echo: bool) -> list[Any]:
    n = spec.world_size
    # Imported once here rather than in every worker: each would otherwise pay ~1 s of CPU
    # (torch._dynamo is pulled in by the first optimizer) on a machine with few cores.
    import accelerate  # noqa: F401
    import torch._dynamo  # noqa: F401  (lazy: as the line above)

    _release_openmp_threads()

    # The parent owns the rendezvous store: port 0 lets the kernel pick a free port, held open
    # for the whole launch, so concurrent launches cannot race for the same one. It is opened
    # only *after* the fork — forking while the store's server thread runs can leave a child
    # holding a lock no thread will release — and its port reaches the workers through a pipe.
    port_read, port_write = os.pipe()
    tag = launch_tag()  # lifeline 4.: what the workers start, detached or not, carries it
    base_env = {
        LAUNCH_TAG: tag,
        "MASTER_ADDR": spec.host,
        "MASTER_PORT": "0",  # replaced in each worker by the port read from the pipe
        "WORLD_SIZE": str(n),
        "LOCAL_WORLD_SIZE": str(n),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "OMP_NUM_THREADS": str(spec.threads),
        "MGPUKIT_MODE": spec.mode,
    }
    if spec.options.get("debug_collectives"):
        base_env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # read when the process group is made
    if spec.host in ("127.0.0.1", "localhost", "::1") and "GLOO_SOCKET_IFNAME" not in os.environ:
        lo = _loopback_interface()
        if lo:
            base_env["GLOO_SOCKET_IFNAME"] = lo
    envs = {r: {**base_env, "RANK": str(r), "LOCAL_RANK": str(r), "GROUP_RANK": "0"} for r in range(n)}
    # torch's elastic layer logs every worker failure at ERROR level, and torch.multiprocessing
    # a "Terminating process ... via signal SIGTERM" per peer it ends; we raise our own error.
    for name in ("torch.distributed.elastic", "torch.multiprocessing.spawn"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    # elastic installs its own signal handlers: Ctrl-C must stay the caller's
    with _callers_signal_handlers(), _freezing_inherited_objects():
        pc = start_processes(
            name="mgpukit",
            entrypoint=_worker_main,
            args={r: (fn, args, kwargs, spec, port_read) for r in range(n)},
            envs=envs,
            logs_specs=DefaultLogsSpecs(log_dir=spec.log_dir, redirects=Std.NONE),
            start_method="fork",
        )
    worker_pids = list(pc.pids().values())
    for pid in worker_pids:
        own_group(pid)
    reaper = Reaper(worker_pids, remove=spec.log_dir, tag=tag)  # kills them (and removes the logs) if this
    # process dies before the `finally` below
    os.close(port_read)
    store = listener = None
    try:
        listener = _listen(spec.host)
        store = dist.TCPStore(spec.host, 0, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=spec.timeout_s),
                              master_listen_fd=listener.fileno())
        listener.detach()  # the store owns the socket now and closes it itself
        listener = None
        os.write(port_write, f"{store.port:08d}".encode() * n)  # 8 bytes per worker: atomic
        result, ended = wait(pc, spec.timeout_s)  # a failure ends the others at once (watch.py)
        if result is None:
            unfinished = [r for r in range(n) if not store.check([_FINISHED_KEY.format(rank=r)])]
            raise LaunchTimeout(
                f"the launch ran past timeout_s={spec.timeout_s:g}s; rank(s) {unfinished} never "
                f"finished. Usually a collective or recv that the other ranks never joined "
                f"(ranks must call collectives in the same order). Raise timeout_s if the work "
                f"is just slow.{tail_logs(spec.log_dir, unfinished)}",
                ranks=unfinished,
            )
        if result.is_failed():
            # every rank's exit code: torch's result keeps only the first failure it noticed
            procs = getattr(getattr(pc, "_pc", None), "processes", None) or []
            exitcodes = {r: p.exitcode for r, p in enumerate(procs)}
            raise worker_error(spec.log_dir, result, store, n, exitcodes, ended=ended)
        if echo:
            _echo(spec.log_dir, n)
        return [result.return_values[r] for r in range(n)]
    finally:
        tree = _process_tree(worker_pids)  # before close: orphans get re-parented away
        kill_groups(worker_pids)  # what a worker started, even once re-parented away from it
        pc.close(death_sig=signal.SIGTERM, timeout=5)
        _kill(tree)  # anything that left its worker's group
        kill_tagged(tag)  # anything that detached itself from the tree (setsid -f, a daemon)
        reaper.disarm()
        os.close(port_write)
        del store
        if listener is not None:
            listener.close()


def _listen(host: str) -> socket.socket:
    """A listening TCP socket on `host`, port 0, for the store to serve on (`master_listen_fd`).

    `TCPStore(host, port, is_master=True)` binds to every interface whatever `host` says; a
    socket bound here first is the only way to keep it on the address asked for."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise LaunchError(f"cannot listen on host={host!r} ({e}); use an address of this "
                          f"machine, or the default 127.0.0.1.") from None
    return sock


def _loopback_interface() -> str | None:
    """The name of the interface holding 127.0.0.1 ("lo" on Linux, "lo0" on macOS)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address.startswith("127.") for a in addrs):
            return name
    return None


def _echo(log_dir: str, n: int) -> None:
    for r in range(n):
        path = os.path.join(log_dir, f"{r}.log")
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                for line in f.read().splitlines():
                    print(f"[rank {r}] {line}")


def _process_tree(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return procs


def _kill(procs: list[psutil.Process]) -> None:
    """Make sure no worker, nor anything a worker started, outlives the launch."""
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)
