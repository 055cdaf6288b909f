"""The analytical cost model: parameters, FLOPs, memory, communication and time, closed form.

No torch inside: everything is arithmetic on a :class:`ModelShape`, a :class:`Layout` and a
:class:`HardwareProfile`, so it answers for a 1T model on 4096 GPUs in milliseconds.

    >>> from mgpukit.costmodel import Layout, plan
    >>> p = plan("70b", 64, "h100-nvlink", Layout.from_global_batch(global_batch=512, dp=8, tp=8,
    ...          zero=1, sp=True, checkpointing="selective"))
    >>> p.fits, p.step_time_s, p.mfu

Modules: ``hardware`` (profiles), ``comm`` (alpha-beta collectives), ``shapes`` (model sizes,
parameter counts; the models themselves are files in ``data/models/``), ``flops``, ``layout``
(parallel degrees + validation), ``pipeline`` (bubble, activations in flight), ``memory`` (ZeRO
+ activations), ``volume`` (bytes sent), ``kernels`` (GEMM roofline with tile/wave quantisation,
memory-bound kernels), ``frameworks`` (the implementation: dp-sync convention, pipeline sends,
kernels; files in ``data/frameworks/``), ``steptime``, ``balance`` (pipeline stages balanced by
cost), ``planner`` (plan + search), ``published`` (Megatron-LM's Table 1), ``validation`` (every
published run beside its prediction, and the error bars they give); ``schedules`` and
``simulate`` hold pipeline schedule tables and their event simulation. The command line on top
of them (``mgpukit plan``) is `mgpukit.commands.plan`, outside this package: formulas only here.
"""

from mgpukit.costmodel.comm import (
    allgather_time,
    allreduce_time,
    broadcast_time,
    group_link,
    link_for_ranks,
    p2p_time,
    reduce_scatter_time,
)
from mgpukit.costmodel.flops import flops_per_step, megatron_flops
from mgpukit.costmodel.frameworks import Framework, get_framework, list_frameworks
from mgpukit.costmodel.hardware import ProfileNotFoundError, list_profiles, load_profile, save_profile
from mgpukit.costmodel.layout import Layout, LayoutError, check_layout
from mgpukit.costmodel.memory import activation_bytes_per_layer, memory_per_rank
from mgpukit.costmodel.pipeline import bubble_fraction, microbatches_in_flight
from mgpukit.costmodel.planner import Plan, plan, search
from mgpukit.costmodel.profile import GemmModel, HardwareProfile, Link, PeakFlops
from mgpukit.costmodel.shapes import ModelShape, get_shape, list_shapes, load_model_file, param_count
from mgpukit.costmodel.steptime import step_time
from mgpukit.costmodel.error_bars import ErrorBar, error_bar
from mgpukit.costmodel.validation import validation_table
from mgpukit.costmodel.volume import comm_bytes_per_step

__all__ = [
    "allgather_time", "allreduce_time", "broadcast_time", "group_link", "link_for_ranks", "p2p_time",
    "reduce_scatter_time", "flops_per_step", "megatron_flops", "GemmModel", "HardwareProfile", "Link", "PeakFlops",
    "ProfileNotFoundError", "list_profiles", "load_profile", "save_profile", "Layout", "LayoutError",
    "check_layout", "activation_bytes_per_layer", "memory_per_rank", "bubble_fraction",
    "microbatches_in_flight", "Plan", "plan", "search", "ModelShape", "get_shape", "list_shapes",
    "param_count", "step_time", "comm_bytes_per_step", "Framework", "get_framework", "list_frameworks",
    "load_model_file", "ErrorBar", "error_bar", "validation_table",
]
