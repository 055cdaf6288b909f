"""Notebook 10's studies under the one name it imports: ``syllabus.<study>``.

Notebook 10 goes beyond the core strategies, one study per module, each running the library
and returning data (records, rows) for the notebook to plot and print, its figures labelled
measured (CPU workers), emulated (virtual clock on a profile) or predicted (closed-form cost
model):

- `lessons.local_sgd`       local SGD: bytes against loss, measured and emulated (its widget: `widgets.local_sgd`)
- `lessons.mixed_cluster`   two kinds of GPU in one DDP job, the even and the balanced split
- `lessons.profiling`       torch.profiler's operators beside the kit's own trace
- `lessons.spot_instances`  a preempted run restarted from checkpoints; the spot savings grid
- `lessons.frameworks`      the frameworks map (the README's table)
- `lessons.claims`          the background articles' claims, each with the kit's figure and verdict

This module only gathers them (``syllabus.local_sgd_study(...)``, ``syllabus.SPOT``, …).
"""
from __future__ import annotations

# Re-exported: notebook 10 calls every study through this module.
from mgpukit.lessons.claims import claims, claims_by_theme, claims_markdown  # noqa: F401
from mgpukit.lessons.frameworks import FRAMEWORKS, frameworks_markdown  # noqa: F401
from mgpukit.lessons.local_sgd import (local_sgd_emulated, local_sgd_markdown, local_sgd_study,  # noqa: F401
                                       one_gpu_per_node, rank_kernel_seconds)
from mgpukit.lessons.mixed_cluster import mixed_cluster_study, mixed_markdown  # noqa: F401
from mgpukit.lessons.profiling import profile_run  # noqa: F401
from mgpukit.lessons.spot_instances import (SPOT, best_savings, holding_markdown, max_rate_holding,  # noqa: F401
                                            preempted_run, spot_verdicts)
