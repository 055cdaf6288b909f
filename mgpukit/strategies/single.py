"""`single`: one process trains on the whole global batch — the reference every strategy's
parity is checked against (same data, same init, same optimizer; fp32). The one trainer with
nothing applied: no gradient sync, no pipeline."""
from __future__ import annotations

from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import data_parallel, register

register("single", family="reference", description="one process, the whole batch: the parity reference",
         layout=data_parallel, min_workers=1, default_workers=1, reference=None, theory=dp_theory,
         composes=())
