"""`mgpukit bench hybrid`: the cost model's step time beside the virtual clock's for five
(dp, tp, pp, m) layouts of 8 ranks.

Setting (say it with every figure): ``hybrid`` on ``gpt-tiny``, global batch 8, fp32,
emulated on ``h100-nvlink`` (8 CPU workers running the real program; the step time is the
virtual clock's, the median of the steps after the first), against the analytic model
(`costmodel.step_time` via `strategies.hybrid.theory.predicted_step`: the slowest stage's
compute and exposed communication per micro-batch, stretched by the schedule's bubble, plus
the dp sync, which runs after the schedule).

The issue asks for this in *shape mode* (the same program at real scale under
`FakeTensorMode`); until that lands this runs the tiny model, where every message is
latency-bound and the stages are unequal (embedding, head and loss are a large share), so the
analytic model's "every stage is as slow as the last" shows. A ``--shape`` switch only has to
change `_SETTING` and the `run` keywords (`lessons.hybrid.analytic_vs_emulated`).
"""
from __future__ import annotations

from mgpukit.bench import bench

_SETTING = {"model": "gpt-tiny", "profile": "h100-nvlink", "global_batch": 8}


def table(rows: list[dict]) -> str:
    head = f"{'dp':>3} {'tp':>3} {'pp':>3} {'m':>3} {'analytic':>12} {'emulated':>12} {'ratio':>7}  within 10%"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['dp']:>3} {r['tp']:>3} {r['pp']:>3} {r['m']:>3} {r['analytic_s'] * 1e6:>10.1f}us "
                     f"{r['emulated_s'] * 1e6:>10.1f}us {r['ratio']:>7.3f}  {'yes' if r['within_10pct'] else 'NO'}")
    return "\n".join(lines)


@bench("hybrid", help="analytic vs emulated step time of five (dp, tp, pp, m) layouts of 8 ranks "
                      "(gpt-tiny, h100-nvlink; shape mode to come)")
def bench_hybrid(args=None) -> dict:
    from mgpukit.lessons.hybrid import LAYOUTS, analytic_vs_emulated

    quick = bool(getattr(args, "quick", False))
    layouts = LAYOUTS[:2] if quick else LAYOUTS
    print(f"hybrid on {_SETTING['model']}, global batch {_SETTING['global_batch']}, fp32: analytic "
          f"(cost model) vs emulated (virtual clock, {_SETTING['profile']}, 8 CPU workers)")
    rows = analytic_vs_emulated(layouts, profile=_SETTING["profile"], model=_SETTING["model"],
                                global_batch=_SETTING["global_batch"])
    print(table(rows))
    return {**_SETTING, "mode": "emulated", "rows": rows, "all_within_10pct": all(r["within_10pct"] for r in rows)}
