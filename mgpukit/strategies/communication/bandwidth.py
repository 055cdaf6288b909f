"""Bus bandwidth vs message size, and the alpha-beta fit — measured the way nccl-tests does.

An all-reduce of ``B`` bytes that takes ``t`` seconds has an *algorithm bandwidth*
``algbw = B / t`` and a *bus bandwidth* ``busbw = 2(n-1)/n · B / t`` (NVIDIA/nccl-tests,
doc/PERFORMANCE.md): the factor is the share of the buffer each rank must send in a
bandwidth-optimal (ring) all-reduce, so busbw is the per-link rate the run reached and can be
compared with the link's bandwidth whatever ``n``. An algorithm that moves more bytes than the
ring (the naive one through rank 0) shows up as a lower busbw.

Small messages pay the latency, large ones approach the link bandwidth: fitting
``t = α + B/β`` (`fit_alpha_beta`) to the measured times gives both. For a ring all-reduce the
fitted ``β`` times ``2(n-1)/n`` is the per-link bandwidth (the busbw asymptote) and
``α / 2(n-1)`` the latency of one ring step — the two figures a hardware profile holds.
"""
from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence

import torch
import torch.distributed as dist

from mgpukit.costmodel.comm import bus_factor, fit_alpha_beta, ring_link
from mgpukit.measure.recorder import Recorder
from mgpukit.runtime.context import WorkerContext
from mgpukit.runtime.launcher import OversubscribedWarning, launch, resolve_mode
from mgpukit.strategies.communication.collectives import all_reduce_fn


def _measure_worker(ctx: WorkerContext, sizes: list[int], impls: list[str], repeats: int) -> dict | None:
    """On every rank: for each size, `repeats` timed all-reduces of each impl, interleaved so
    that load from elsewhere on the machine hits every impl alike. The time of one repeat is
    the slowest rank's (the collective is done when the last rank has its result)."""
    rec = Recorder(ctx)
    n = ctx.world_size
    times = {impl: [] for impl in impls}
    # on GPUs the clock reads host time: wait for the device around each timed all-reduce
    sync = rec.clock.sync
    for size in sizes:
        tensor = torch.empty(max(1, size // 4), dtype=torch.float32, device=ctx.device)
        per = {impl: [] for impl in impls}
        for rep in range(repeats + 1):  # repeat 0 warms up (connections, allocations)
            for impl in impls:
                fn = all_reduce_fn(impl)
                with rec.untimed():
                    tensor.fill_(float(ctx.rank + 1))
                    dist.barrier()
                    if rec.clock.emulated:  # start every rank's virtual clock together
                        ready = torch.tensor([rec.now()], dtype=torch.float64, device=ctx.device)
                        dist.all_reduce(ready, op=dist.ReduceOp.MAX)
                        rec.clock.join(float(ready.item()))
                    sync()
                start = rec.now()
                fn(rec, tensor)
                rec.wait_all()
                sync()
                # NCCL reduces only tensors on the rank's GPU
                elapsed = torch.tensor([rec.now() - start], dtype=torch.float64, device=ctx.device)
                with rec.untimed():
                    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                if rep == 0 and not bool((tensor == n * (n + 1) / 2).all()):
                    raise RuntimeError(f"{impl} all-reduce of {size} bytes gave a wrong sum.")
                if rep:
                    per[impl].append(float(elapsed.item()))
        for impl in impls:
            times[impl].append(per[impl])
    return times if ctx.rank == 0 else None


def compare_bandwidth(sizes: Sequence[int], *, workers: int = 2,
                      impls: Sequence[str] = ("backend", "ring", "naive", "tree"),
                      repeats: int = 5, mode: str = "auto", profile: str | None = None,
                      timeout_s: float = 300.0) -> dict[str, dict]:
    """`measure_bandwidth` for several all-reduce implementations in one launch, interleaved.

    Returns ``{impl: result}`` (see `measure_bandwidth`). "tree" is left out, with a note in
    the result's place, when `workers` is not a power of two.
    """
    sizes = [int(s) for s in sizes]
    if not sizes or min(sizes) < 4:
        raise ValueError(f"sizes are message sizes in bytes, at least 4 (one float32); got {sizes}.")
    for impl in impls:
        all_reduce_fn(impl)  # an unknown name fails here, before anything starts
    skipped = {}
    if workers & (workers - 1) and "tree" in impls:
        skipped["tree"] = {"impl": "tree", "skipped": f"halving-doubling needs a power-of-two "
                                                      f"number of workers, not {workers}"}
    run = [i for i in impls if i not in skipped]
    mode = resolve_mode(mode, workers)  # "auto" -> "gpu" or "cpu", so the result says which
    with warnings.catch_warnings():
        if mode == "emulated":  # virtual time does not care how many cores the workers share
            warnings.simplefilter("ignore", OversubscribedWarning)
        times = launch(_measure_worker, workers, sizes, run, repeats, takes_context=True, mode=mode, profile=profile,
                       timeout_s=timeout_s, echo=False)[0]
    out = {}
    for impl in impls:
        out[impl] = skipped.get(impl) or _summarise(impl, sizes, times[impl], workers, mode, profile)
    return out


def measure_bandwidth(sizes: Sequence[int], *, workers: int = 2, impl: str = "backend",
                      repeats: int = 5, mode: str = "auto", profile: str | None = None,
                      timeout_s: float = 300.0) -> dict:
    """Time an all-reduce of each size (bytes, float32) on `workers` ranks; bus bandwidth per size.

    impl: "backend" (gloo / NCCL), "ring", "naive" or "tree" (the hand-written ones in
    `collectives`). mode "cpu"/"gpu" measures wall-clock time; "emulated" with a `profile` gives
    the virtual clock's time for that hardware. Returns a dict with, per size, the median time
    over `repeats` (`time_s`), `algbw` and `busbw` (bytes/s), every repeat (`samples_s`), the
    alpha-beta fit of the times (`fit`) and what it predicts (`predicted_s`, `predicted_busbw`).
    """
    return compare_bandwidth(sizes, workers=workers, impls=(impl,), repeats=repeats, mode=mode,
                             profile=profile, timeout_s=timeout_s)[impl]


def _summarise(impl, sizes, samples, n, mode, profile) -> dict:
    med = [statistics.median(s) for s in samples]
    f = bus_factor("all_reduce", n)
    out = {
        "impl": impl, "workers": n, "mode": mode, "profile": profile if mode == "emulated" else None,
        "source": "emulated" if mode == "emulated" else "measured",
        "sizes": sizes, "time_s": med, "samples_s": samples,
        "algbw": [s / t for s, t in zip(sizes, med)],
        "busbw": [f * s / t for s, t in zip(sizes, med)],
        "fit": None, "predicted_s": None, "predicted_busbw": None, "link": None,
    }
    if len(set(sizes)) >= 2:  # a line needs two sizes
        fit = fit_alpha_beta(sizes, med)
        out.update(
            fit=fit,
            predicted_s=[fit["alpha"] + s / fit["beta"] for s in sizes],
            predicted_busbw=[predicted_busbw(fit, s, n) for s in sizes],
            # read as a ring: latency of one ring step, per-link bandwidth (the busbw asymptote)
            link=vars(ring_link(fit, n)),
        )
    return out


def predicted_busbw(fit: dict, size: float, n: int) -> float:
    """The bus bandwidth the fit predicts for one all-reduce of `size` bytes on `n` ranks."""
    return bus_factor("all_reduce", n) * size / (fit["alpha"] + size / fit["beta"])


def bandwidth_table(results: dict[str, dict]) -> list[dict]:
    """Rows (size, impl, time, busbw) from `compare_bandwidth`'s result, for a printed table."""
    rows = []
    for impl, res in results.items():
        if "skipped" in res:
            continue
        for size, t, bw in zip(res["sizes"], res["time_s"], res["busbw"]):
            rows.append({"impl": impl, "bytes": size, "time_ms": t * 1e3, "busbw_GBps": bw / 1e9,
                         "source": res["source"]})
    return rows
