"""Notebook 10, a mixed cluster: two kinds of GPU in one data-parallel job, and the split that evens them.

DDP waits for its slowest rank at every all-reduce, so on an A100 + H100 pair the even split of
the batch leaves the H100 idle. `mixed_cluster_study` runs the even split and the split
`mgpukit.training.hetero.balanced_split` picks (rows in proportion to each GPU's speed) under
the virtual clock, each beside its prediction, then predicts the bars the pair has to beat: a
homogeneous cluster of each kind, and one GPU of each kind alone with the whole batch.
"""
from __future__ import annotations

from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import load_profile
from mgpukit.experiment import run
from mgpukit.training import hetero
from mgpukit.lessons.tables import markdown_table


def mixed_cluster_study(*, profiles=("a100-nvlink", "h100-nvlink"), links: str = "h100-nvlink",
                        global_batch: int = 32, steps: int = 3) -> list[dict]:
    """Emulated DDP on a mixed cluster (rank i computes on `profiles[i]`): the even split, the
    split `hetero.balanced_split` picks, and each one's predicted step time (with each rank's
    predicted compute before the all-reduce, ``rank_before_s``); then, predicted, a homogeneous
    cluster of each kind and one GPU of each kind alone with the whole batch — the bar a mixed
    pair has to beat for the slower GPU to be worth adding. Emulated on the
    kernels only (`HardwareProfile.kernels_only`): the closed form counts no host launches, and
    a tiny model's step on a GPU is nearly all launches (notebook 00) — the same for both kinds
    of GPU, which would hide the difference in compute this lesson is about."""
    cfg = RunConfig(global_batch=global_batch)
    n = len(profiles)
    splits = {"even": (global_batch // n,) * n, "balanced": hetero.balanced_split(cfg, profiles, links)}
    rows = []
    for label, split in splits.items():
        rec = run("ddp", workers=n, steps=steps, mode="emulated", profile=load_profile(links).kernels_only(),
                  parity=False, global_batch=global_batch, options={"batch_split": ",".join(map(str, split)),
                                                      "rank_profiles": ",".join(profiles)})
        rows.append({"split": label, "rows": split, "emulated_s": rec["step_time_s"][-1],
                     "predicted_s": hetero.predicted_mixed_step(cfg, split, profiles, links)})
    for p in dict.fromkeys(profiles):  # a homogeneous cluster of each kind, predicted
        rows.append({"split": f"all {p}", "rows": splits["even"], "emulated_s": None,
                     "predicted_s": hetero.predicted_mixed_step(cfg, splits["even"], (p,) * n, links)})
    for p in dict.fromkeys(profiles):  # one GPU of each kind alone with the whole batch, predicted
        alone = hetero.rank_times(cfg, (global_batch,), (p,), links)[0]
        rows.append({"split": f"{p} alone", "rows": (global_batch,), "emulated_s": None,
                     "predicted_s": alone["before_s"] + alone["after_s"]})
    for r, t in zip(rows[:2], (hetero.rank_times(cfg, rows[i]["rows"], profiles, links) for i in (0, 1))):
        r["rank_before_s"] = [x["before_s"] for x in t]  # each rank's compute before the all-reduce
    rows[1]["one_row_before_s"] = [x["before_s"] for x in hetero.rank_times(cfg, (1,) * n, profiles, links)]
    return rows


def mixed_markdown(rows: list[dict]) -> str:
    """:func:`mixed_cluster_study`'s rows as a table: split, rows per rank, emulated, predicted."""
    body = [[r["split"], str(r["rows"]), f"{r['emulated_s'] * 1e6:,.0f}" if r["emulated_s"] else "—",
             f"{r['predicted_s'] * 1e6:,.0f}"] for r in rows]
    return markdown_table(["split", "rows per rank", "emulated µs", "predicted µs"], body)
