"""The stable facade the notebooks import: studies, labs and drivers built on the library.

Notebooks import from here (and from `mgpukit` itself, `plots`, `widgets`, `exercises`), never
from the layers underneath, so those can move without a notebook noticing
(`tests/test_notebook_imports.py` holds every notebook to this).

A lesson composes: it runs studies and hands their data to a figure (`mgpukit.plots`) or a
control (`mgpukit.widgets`, which notebooks import directly); it builds no figure and no widget
itself, and its closed forms come from `mgpukit.costmodel` (`tests/test_imports.py`). The studies
the benchmarks share with the notebooks live one layer down, in `mgpukit.studies` (the launch-bound
GPT, the pipeline lab, the ZeRO stages measured, checkpointing's trade, tp's links, the hybrid
runs), and are re-exported here: `launch_bound_study`, `run_lab` (`mgpukit.studies.pipeline_lab`),
`sharding_study`.

- `real_gpus`      notebook 00: that step held against the H200 and H100 measured (`data/reference/`)
- `data_parallel`  notebook 01's studies: strategies compared, scaling, the learning-rate rule
- `compression`    notebook 03: `run_compressed`, `fp32_reference`
- `pipeline_balance` notebook 04: the split of a GPT's blocks that balances its stages' costs
- `tensor_parallel` notebook 05: the matmul by hand, bytes vs the table, SP's memory, links
- `memory`         notebook 07: activations measured vs predicted, checkpointing's trade,
                   precision curves, what fits (and the exercises' answers)
- `syllabus`       notebook 10's studies under one name, one module each: `local_sgd`,
                   `mixed_cluster`, `profiling`, `spot_instances`, `frameworks`, `claims`
- `stragglers`     notebook 10: a throttled rank measured, re-balanced and dropped
- `measured`       notebooks 05, 07, 09: what one real H100 measured (data/reference/), beside the
                   profile's prediction of the same kernels
"""
from mgpukit.lessons.compression import fp32_reference, run_compressed
from mgpukit.studies.launch import gradient_tensors, launch_bound_study
from mgpukit.lessons.real_gpus import h100_measured_step, held_against_real_gpus
from mgpukit.lessons.data_parallel import compare_strategies, lr_scaling_study, scaling_records
from mgpukit.studies.warm import warm_parent
from mgpukit.lessons import memory  # noqa: F401  (notebook 07 uses it as a module)
from mgpukit.lessons.pipeline_balance import fastest_split
from mgpukit.studies.pipeline_lab import run_lab
from mgpukit.lessons import stragglers, syllabus  # noqa: F401  (notebook 10 uses them as modules)
from mgpukit.lessons import tensor_parallel
from mgpukit.studies.sharding import (model_state_table, offload_trade, sharding_study,
                                      step_time_ratio)
from mgpukit.studies.compression import METHOD_OF, breakeven_label, step_time_curves  # 03


# The library pieces a notebook names directly, re-exported so a notebook's imports never reach
# past this facade. Grouped by the layer they come from; the notebook that uses each is noted.
from mgpukit.config import RunConfig  # 00, 01, 03, 04, 07
from mgpukit.costmodel import allreduce_time  # 01
from mgpukit.experiment import run_each  # 03, 04: several runs on the same workers, in one launch
from mgpukit.prepare import prepare  # 03, 04: a run checked and resolved, for `run_each`
from mgpukit.costmodel import comm as comm_cost  # noqa: F401  (02 uses it as a module: `cost.…`)
from mgpukit.costmodel import spot  # noqa: F401  (10 uses it as a module)
from mgpukit.costmodel.comm import bus_factor  # 00
from mgpukit.costmodel.gpt_step import ddp_step_time, pipeline_step_time  # 01, 03, 04
from mgpukit.costmodel.hardware import Link, load_profile  # 01-04, 09
from mgpukit.costmodel.layout import Layout  # 06, 07
from mgpukit.costmodel.memory import activation_bytes_per_layer, model_state_bytes, offload_traffic_bytes  # 06, 07
from mgpukit.costmodel.schedules import build_schedule, describe  # 04
from mgpukit.costmodel.shapes import get_shape, list_shapes, param_count  # 01, 02, 06, 07, 09
from mgpukit.costmodel.simulate import bubble_formula  # 04
from mgpukit.costmodel.error_bars import error_bar  # 09
from mgpukit.costmodel.validation import KNOWN_GAPS, format_validation  # 09
from mgpukit.costmodel.training_cost import format_duration, format_money, six_nd, time_to_train  # 09
from mgpukit.measure.bounds import check_larger_job, show_flags  # measured figures vs physical bounds
from mgpukit.measure.idle import predicted_from_costs  # 04
from mgpukit.measure.spread import beyond_spread, format_spread, median_step  # a measured step: median with its spread
from mgpukit.measure.recorder import Recorder  # 02
from mgpukit.models import gpt_tiny  # 08
from mgpukit.runtime.hardware import default_mode, default_workers, env_info  # 00
from mgpukit.strategies.communication import collectives  # noqa: F401  (02 uses it as a module: `C.…`)
from mgpukit.strategies.communication.bandwidth import bandwidth_table, compare_bandwidth, predicted_busbw  # 02
from mgpukit.strategies.compression import theory as compression_theory  # noqa: F401  (03: `theory.…`)
from mgpukit.strategies.compression.common import steady_bytes_per_step  # 03
from mgpukit.strategies.data_parallel.theory import dp_theory, predicted_speedup  # 00, 01
from mgpukit.strategies.sharding.theory import predicted_model_states  # 06
from mgpukit.training.building import count_params  # 08

__all__ = ["activation_bytes_per_layer", "beyond_spread", "launch_bound_study", "held_against_real_gpus", "h100_measured_step", "gradient_tensors", "fastest_split", "run_compressed", "fp32_reference", "compare_strategies", "scaling_records",
           "lr_scaling_study", "warm_parent", "run_lab", "tensor_parallel", "sharding_study",
           "step_time_ratio", "model_state_table", "offload_trade", "syllabus", "stragglers",
           "METHOD_OF", "breakeven_label", "step_time_curves",
           # re-exported from the layers underneath
           "RunConfig", "Layout", "allreduce_time", "comm_cost", "spot", "bus_factor", "ddp_step_time",
           "pipeline_step_time", "Link", "load_profile", "model_state_bytes", "offload_traffic_bytes",
           "build_schedule", "describe", "get_shape", "param_count", "bubble_formula", "format_duration",
           "format_money", "six_nd", "time_to_train", "predicted_from_costs", "Recorder", "gpt_tiny",
           "default_mode", "default_workers", "env_info", "collectives", "bandwidth_table",
           "compare_bandwidth", "predicted_busbw", "compression_theory", "steady_bytes_per_step",
           "dp_theory", "predicted_speedup", "predicted_model_states", "count_params", "check_larger_job",
           "show_flags", "format_spread", "median_step", "list_shapes", "format_validation", "KNOWN_GAPS",
           "error_bar", "run_each", "prepare"]
