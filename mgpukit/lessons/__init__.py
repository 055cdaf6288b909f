"""The stable facade the notebooks import: studies, labs and drivers built on the library.

Notebooks import from here (and from `plots`, `widgets`, `exercises`), never private helpers,
so the modules underneath can move without a notebook noticing.

- `launch`         notebook 00: the tiny GPT launch-bound on one emulated H100
- `data_parallel`  notebook 01's studies: strategies compared, scaling, the learning-rate rule
- `compression`    notebook 03: `run_compressed`, `fp32_reference`
- `pipeline_lab`   notebook 04: equal-cost stages, several schedules in one launch
- `tensor_parallel` notebook 05: the matmul by hand, bytes vs the table, SP's memory, links
- `sharding`       notebook 06: ZeRO stages measured vs formulas, zero3 vs fsdp2, offload
- `memory`         notebook 07: activations measured vs predicted, checkpointing's trade,
                   precision curves, what fits (and the exercises' answers)
- `syllabus`       notebook 10: local SGD, mixed clusters, profiling, spot instances, the
                   frameworks map, the articles' claims
- `stragglers`     notebook 10: a throttled rank measured, re-balanced and dropped
"""
from mgpukit.lessons.compression import fp32_reference, run_compressed
from mgpukit.lessons.launch import launch_bound_study
from mgpukit.lessons.data_parallel import (compare_strategies, lr_scaling_study, scaling_records,
                                           warm_parent)
from mgpukit.lessons import memory  # noqa: F401  (notebook 07 uses it as a module)
from mgpukit.lessons.pipeline_lab import run_lab
from mgpukit.lessons import stragglers, syllabus  # noqa: F401  (notebook 10 uses them as modules)
from mgpukit.lessons import tensor_parallel
from mgpukit.lessons.sharding import (model_state_table, offload_trade, sharding_study,
                                      step_time_ratio)

__all__ = ["launch_bound_study", "run_compressed", "fp32_reference", "compare_strategies", "scaling_records",
           "lr_scaling_study", "warm_parent", "run_lab", "tensor_parallel", "sharding_study",
           "step_time_ratio", "model_state_table", "offload_trade", "syllabus", "stragglers"]
