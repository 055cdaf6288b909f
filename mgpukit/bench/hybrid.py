"""`mgpukit bench hybrid`: the cost model's step time beside the virtual clock's for five
(dp, tp, pp, m) layouts of 8 ranks.

Setting (say it with every figure): ``hybrid`` on ``gpt2-350m`` in shape mode (the real
program at real scale under fake tensors, `mgpukit.measure.shape`), global batch 8, fp32,
emulated on ``h100-nvlink`` with its host launches (8 CPU workers; the step time is the virtual
clock's, the last step), against the analytic model (`costmodel.step_time` via
`strategies.hybrid.theory.predicted_step`: each stage's GEMMs, memory-bound kernels and exposed
communication per micro-batch, the schedule's fill and drain, plus the dp sync, which runs
after the schedule). ``--quick``: two layouts of ``gpt-tiny`` with real tensors on the
profile's kernels only (a tiny model on a GPU is launch-bound; the closed form counts no
launches).
"""
from __future__ import annotations

from mgpukit.bench import bench
from mgpukit.studies.hybrid import LAYOUTS, analytic_vs_emulated

_SETTING = {"model": "gpt2-350m", "profile": "h100-nvlink", "global_batch": 8, "shape": True}
_QUICK = {"model": "gpt-tiny", "profile": "h100-nvlink", "global_batch": 8, "shape": False}


def hybrid_table(rows: list[dict]) -> str:
    head = f"{'dp':>3} {'tp':>3} {'pp':>3} {'m':>3} {'analytic':>12} {'emulated':>12} {'ratio':>7}  within 10%"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['dp']:>3} {r['tp']:>3} {r['pp']:>3} {r['m']:>3} {r['analytic_s'] * 1e3:>10.3f}ms "
                     f"{r['emulated_s'] * 1e3:>10.3f}ms {r['ratio']:>7.3f}  {'yes' if r['within_10pct'] else 'NO'}")
    return "\n".join(lines)


@bench("hybrid", help="analytic vs emulated step time of five (dp, tp, pp, m) layouts of 8 ranks "
                      "(gpt2-350m in shape mode on h100-nvlink; --quick: gpt-tiny, two layouts)")
def bench_hybrid(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    setting = _QUICK if quick else _SETTING
    layouts = LAYOUTS[:2] if quick else LAYOUTS
    how = "shape mode, host launches included" if setting["shape"] else "real tensors, kernels only"
    print(f"hybrid on {setting['model']}, global batch {setting['global_batch']}, fp32: analytic "
          f"(cost model) vs emulated (virtual clock, {setting['profile']}, {how}, 8 CPU workers)")
    rows = analytic_vs_emulated(layouts, **setting)
    print(hybrid_table(rows))
    return {**setting, "mode": "emulated", "rows": rows, "all_within_10pct": all(r["within_10pct"] for r in rows)}
