"""What every value of a hardware profile's TOML may be: its kind and its sane range.

`HardwareProfile.from_dict` converts what it reads (`int(...)`, `float(...)`), and a conversion
hides mistakes: ``gpus_per_node = 1.5`` became 1, ``async = "no"`` became True (a non-empty
string), ``peak_flops = 5`` ended in a traceback from deep inside. So the whole file is checked
first against `SCHEMA` (`mgpukit.costmodel.file_schema`, the schema model files use too):
kinds without coercion, finite values inside ranges wide enough for any real machine — a link
latency of 1e300 s or a memory of 1e-300 bytes is a typo, not hardware — no unknown keys (a
misspelt key used to be ignored and its default used), and the keys `[attention]` needs.
Which top-level keys a profile must have is `from_dict`'s to say (it names the missing one).
"""
from __future__ import annotations

from mgpukit.costmodel.file_schema import BOOLEAN, INTEGER, NUMBER, STRING, TILES, Field, check_schema

SECOND = Field(NUMBER, 0, 1.0)  # a host or kernel time per op: microseconds, never a second
FRACTION = Field(NUMBER, 0, 1.0, low_open=True)  # an efficiency: (0, 1]
SHARE = Field(NUMBER, 0, 1.0)  # [0, 1]
FLOPS = Field(NUMBER, 1e6, 1e18)  # a slow CPU core .. 1,000x the largest GPU
BYTES_PER_S = Field(NUMBER, 1e3, 1e16)  # a modem .. 10,000x HBM3e
LINK = {"alpha": Field(NUMBER, 0, 1.0, required=True),  # seconds per hop: a second is no link
        "beta": Field(NUMBER, 1e3, 1e16, required=True)}

_GEMM = {"efficiency": FRACTION, "sms": Field(INTEGER, 1, 1_000_000), "tiles": Field(TILES, high=65536),
         "k_half": Field(NUMBER, 0, 1e6), "latency": SECOND, "sustained": SHARE}

SCHEMA: dict = {
    "name": Field(STRING, 1, 200),
    "description": Field(STRING, 0, 10_000),
    "gpus_per_node": Field(INTEGER, 1, 1024),
    "memory_bytes": Field(NUMBER, 2**20, 2**50),  # 1 MiB .. 1 PiB per device
    "memory_bandwidth": BYTES_PER_S,
    "peak_flops": {"fp32": FLOPS, "tf32": FLOPS, "bf16": FLOPS, "fp16": FLOPS, "fp8": FLOPS},
    "intra_node": LINK,
    "inter_node": LINK,
    "efficiency": {"compute": FRACTION, "usable_memory": FRACTION, "op_overhead": SECOND,
                   "op_overhead_forward": SECOND, "op_overhead_backward": SECOND,
                   "op_overhead_no_grad": SECOND, "model_code_factor": Field(NUMBER, 0, 100)},
    "gemm": {**_GEMM, "fp32": dict(_GEMM), "fp8": dict(_GEMM)},
    "attention": {"forward": Field(NUMBER, 0, 1.0, low_open=True, required=True),
                  "backward": Field(NUMBER, 0, 1.0, low_open=True, required=True),
                  "fp32_forward": Field(NUMBER, 0, 1.0, low_open=True, required=True),
                  "fp32_backward": Field(NUMBER, 0, 1.0, low_open=True, required=True),
                  "causal_skip": Field(BOOLEAN), "head_dim_half": Field(NUMBER, 0, 1e5),
                  "block_overhead": Field(NUMBER, 0, 1e4), "block_overhead_backward": Field(NUMBER, 0, 1e4),
                  "tail": Field(NUMBER, 0, 100), "tail_backward": Field(NUMBER, 0, 100)},
    "launch": {"async": Field(BOOLEAN), "min_kernel": SECOND, "collective": SECOND, "host_op": SECOND},
    "memory": {"blas_workspace": Field(NUMBER, 0, 2**40)},
    "scale": {"gpu_spread": SHARE},
}


def check_profile_types(d) -> None:
    """Raise ValueError naming the first key of the profile `d` that `SCHEMA` refuses."""
    check_schema(d, SCHEMA, what="the profile")
