"""`mgpukit bench comm`: the hand-written ring all-reduce against the backend's, by bus bandwidth.

Both run in one launch, interleaved repeat by repeat, so whatever else loads the machine slows
both alike; the figure that matters is the ratio at 16 MB (target >= 0.7: a ring written from
send/recv in Python should come close to gloo's C++ ring once messages are large). The naive
(through rank 0) and halving-doubling ("tree") all-reduces are measured alongside.
"""
from __future__ import annotations

from mgpukit.bench import bench
from mgpukit.strategies.communication.bandwidth import bandwidth_table, compare_bandwidth

SIZE_16MB = 16 * 2**20


@bench("comm", help="ring all-reduce from send/recv vs the backend's: bus bandwidth at 16 MB "
                    "(target ratio >= 0.7), plus naive and tree")
def bench_comm(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    workers = getattr(args, "workers", None) or 2
    sizes = [2**10, 2**20, SIZE_16MB] if quick else [2**10, 2**14, 2**18, 2**20, 2**22, SIZE_16MB]
    repeats = getattr(args, "repeats", None) or (3 if quick else 7)
    results = compare_bandwidth(sizes, workers=workers, impls=("backend", "ring", "naive", "tree"),
                                repeats=repeats)
    at = sizes.index(SIZE_16MB)
    ratio = results["ring"]["busbw"][at] / results["backend"]["busbw"][at]
    rows = bandwidth_table(results)
    print(f"all-reduce bus bandwidth on {workers} CPU workers (measured, median of {repeats}):")
    print(f"{'impl':>8} {'bytes':>10} {'time ms':>9} {'busbw GB/s':>11}")
    for r in rows:
        print(f"{r['impl']:>8} {r['bytes']:>10} {r['time_ms']:>9.3f} {r['busbw_GBps']:>11.3f}")
    for impl, res in results.items():
        if "skipped" in res:
            print(f"{impl}: skipped ({res['skipped']})")
        elif res["fit"]:
            fit = res["fit"]
            print(f"{impl:>8} alpha-beta fit: alpha {fit['alpha'] * 1e6:.0f} us, "
                  f"beta {fit['beta'] / 1e9:.3f} GB/s (algorithm bandwidth)")
    ok = ratio >= 0.7
    print(f"ring / backend bus bandwidth at 16 MB: {ratio:.2f} — target >= 0.7: "
          f"{'ok' if ok else 'MISSED'}")
    return {"workers": workers, "repeats": repeats, "rows": rows,
            "fits": {k: v.get("fit") for k, v in results.items()},
            "ring_over_backend_16MB": ratio, "target": 0.7, "ok": ok}
