"""`mgpukit bench dp`: is our data parallelism as fast as PyTorch's, and does it scale?

Three ratios, each measured in this one run on CPU workers (gloo), so machine-wide noise
cancels as far as it can (runs of the two sides are interleaved, medians taken):

1. **dp-bucketed / ddp throughput** — same model, steps, workers (target >= 0.9): our hooks
   and buckets against torch DDP's C++ reducer.
2. **speedup of 2 workers over 1** — `single` vs `dp-bucketed` on a compute-bound MLP with a
   large global batch, one intra-op thread per worker in both runs (target >= 1.7; the limit
   is 2.0). With threads unpinned, one worker would already use both cores.
3. **ring all-reduce / backend all-reduce bus bandwidth at 16 MB** — the from-scratch ring of
   `mgpukit.strategies.communication.collectives` against gloo's own (skipped, with a note,
   when that module is not there).
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from mgpukit.bench import bench
from mgpukit.costmodel.comm import bus_factor
from mgpukit.experiment import run
from mgpukit.studies.warm import warm_parent
from mgpukit.measure.recorder import Recorder
from mgpukit.runtime.launcher import launch
from mgpukit.strategies.communication.collectives import ring_all_reduce


def _interleaved(a, b, repeats: int) -> tuple[list[float], list[float]]:
    """tokens/s of `a()` and `b()` run alternately `repeats` times (a, b, a, b, ...)."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(a()["tokens_per_s"])
        tb.append(b()["tokens_per_s"])
    return ta, tb


def _ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(num, den))


def bench_bucketed_vs_ddp(*, steps: int, repeats: int, workers: int = 2) -> dict:
    kw = dict(workers=workers, mode="cpu", model="gpt-tiny", global_batch=32, steps=steps, parity=False)
    ours, ddp = _interleaved(lambda: run("dp-bucketed", **kw), lambda: run("ddp", **kw), repeats)
    ratio = _ratio(ours, ddp)
    return {"model": "gpt-tiny", "global_batch": 32, "workers": workers, "steps": steps,
            "dp_bucketed_tokens_per_s": ours, "ddp_tokens_per_s": ddp, "ratio": ratio,
            "target": 0.9, "ok": ratio >= 0.9}


def bench_speedup(*, global_batch: int, steps: int, repeats: int) -> dict:
    kw = dict(mode="cpu", model="mlp-wide", global_batch=global_batch, steps=steps, parity=False,
              threads_per_worker=1)
    one, two = _interleaved(lambda: run("single", workers=1, **kw),
                            lambda: run("dp-bucketed", workers=2, **kw), repeats)
    speedup = _ratio(two, one)
    return {"model": "mlp-wide", "global_batch": global_batch, "steps": steps,
            "threads_per_worker": 1, "one_worker_rows_per_s": one, "two_workers_rows_per_s": two,
            "speedup": speedup, "target": 1.7, "limit": 2.0, "ok": speedup >= 1.7,
            "above_limit": speedup > 2.0 * 1.02}  # superlinear: suspect the thread pinning


def _time_all_reduce(fn, tensor, iters: int) -> float:
    fn(tensor)  # warm-up: connections, buffers
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn(tensor)
    dist.barrier()
    return (time.perf_counter() - start) / iters


def _bus_bandwidths(ctx, nbytes: int, iters: int) -> dict:
    """Runs on every rank: seconds per all-reduce of the backend and of our ring."""
    rec = Recorder(ctx)  # both sides go through it: same bookkeeping per call
    n = dist.get_world_size()
    tensor = torch.ones(nbytes // 4)
    bus = bus_factor("all_reduce", n) * nbytes  # bytes each rank sends in a ring all-reduce
    backend_s = ring_s = 0.0
    for _ in range(2):  # interleave backend, ring, backend, ring
        backend_s += _time_all_reduce(lambda t: rec.all_reduce(t), tensor, iters)
        ring_s += _time_all_reduce(lambda t: ring_all_reduce(rec, t), tensor, iters)
    return {"backend_busbw": 2 * bus / backend_s, "ring_busbw": 2 * bus / ring_s}


def bench_ring(*, nbytes: int = 16 * 2**20, iters: int, workers: int = 2) -> dict:
    try:
        from mgpukit.strategies.communication.collectives import ring_all_reduce  # noqa: F401
    except ImportError as e:
        return {"skipped": True, "note": f"ring all-reduce not available yet ({e}); skipped"}
    out = launch(_bus_bandwidths, workers, nbytes, iters, mode="cpu", echo=False, takes_context=True)[0]
    ratio = out["ring_busbw"] / out["backend_busbw"]
    return {"skipped": False, "bytes": nbytes, "workers": workers, **out, "ratio": ratio}


@bench("dp", help="dp-bucketed vs DDP throughput (>=0.9), 2-vs-1 worker speedup (>=1.7), "
                  "ring vs backend all-reduce busbw at 16 MB")
def bench_dp(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (2 if quick else 3)
    warm_parent()
    result = {
        "bucketed_vs_ddp": bench_bucketed_vs_ddp(steps=6 if quick else 12, repeats=repeats),
        "speedup_2_over_1": bench_speedup(global_batch=1024 if quick else 2048, steps=3 if quick else 4,
                                          repeats=repeats),
        "ring_vs_backend": bench_ring(iters=3 if quick else 10),
    }
    b, s, r = result["bucketed_vs_ddp"], result["speedup_2_over_1"], result["ring_vs_backend"]
    print(f"measured on CPU workers (gloo), {repeats} interleaved repeats, medians:")
    print(f"  dp-bucketed / ddp throughput   {b['ratio']:.2f}  ({b['model']}, {b['workers']} workers, "
          f"batch {b['global_batch']}, {b['steps']} steps) — target >= 0.9: {'ok' if b['ok'] else 'MISSED'}")
    print(f"  speedup 2 workers over 1       {s['speedup']:.2f}  ({s['model']}, batch {s['global_batch']}, "
          f"1 intra-op thread per worker in both) — target >= 1.7, limit 2.0: "
          f"{'ok' if s['ok'] else 'MISSED'}" + (" (ABOVE the limit?)" if s["above_limit"] else ""))
    if r["skipped"]:
        print(f"  ring / backend all-reduce busbw  — {r['note']}")
    else:
        print(f"  ring / backend all-reduce busbw {r['ratio']:.2f}  (16 MB, {r['workers']} workers: "
              f"ring {r['ring_busbw'] / 1e9:.2f} GB/s, backend {r['backend_busbw'] / 1e9:.2f} GB/s) — "
              f"target >= 0.7: {'ok' if r['ratio'] >= 0.7 else 'MISSED'}")
    return result
