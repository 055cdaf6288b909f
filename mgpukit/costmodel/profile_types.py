"""The type of every value a hardware profile's TOML may hold, checked before it is used.

`HardwareProfile.from_dict` converts what it reads (`int(...)`, `float(...)`, `bool(...)`), and a
conversion hides mistakes: ``gpus_per_node = 1.5`` became 1, ``async = "no"`` became True (a
non-empty string), and ``peak_flops = 5`` or ``intra_node = [1, 2]`` ended in a traceback from
deep inside. So each known key is checked first, without coercion, and a wrong one is refused
in one sentence naming the key and the type it needs. Keys a profile leaves out are not this
module's business (`from_dict` names a missing required key); unknown keys are ignored.
"""
from __future__ import annotations

NUMBER, INTEGER, BOOLEAN, STRING, TABLE, TILES = "number", "integer", "boolean", "string", "table", "tiles"

_GEMM = {"efficiency": NUMBER, "sms": INTEGER, "tiles": TILES, "k_half": NUMBER, "latency": NUMBER,
         "sustained": NUMBER}

SCHEMA: dict = {
    "name": STRING,
    "description": STRING,
    "gpus_per_node": INTEGER,
    "memory_bytes": NUMBER,
    "memory_bandwidth": NUMBER,
    "peak_flops": {"fp32": NUMBER, "tf32": NUMBER, "bf16": NUMBER, "fp16": NUMBER, "fp8": NUMBER},
    "intra_node": {"alpha": NUMBER, "beta": NUMBER},
    "inter_node": {"alpha": NUMBER, "beta": NUMBER},
    "efficiency": {"compute": NUMBER, "usable_memory": NUMBER, "op_overhead": NUMBER,
                   "op_overhead_forward": NUMBER, "op_overhead_backward": NUMBER,
                   "op_overhead_no_grad": NUMBER, "model_code_factor": NUMBER},
    "gemm": {**_GEMM, "fp32": dict(_GEMM), "fp8": dict(_GEMM)},
    "attention": {"forward": NUMBER, "backward": NUMBER, "fp32_forward": NUMBER,
                  "fp32_backward": NUMBER, "causal_skip": BOOLEAN, "head_dim_half": NUMBER,
                  "block_overhead": NUMBER, "block_overhead_backward": NUMBER, "tail": NUMBER,
                  "tail_backward": NUMBER},
    "launch": {"async": BOOLEAN, "min_kernel": NUMBER, "collective": NUMBER, "host_op": NUMBER},
    "memory": {"blas_workspace": NUMBER},
    "scale": {"gpu_spread": NUMBER},
}

_WHAT = {NUMBER: "a number", INTEGER: "a whole number (no decimal point)", BOOLEAN: "true or false",
         STRING: "a quoted string", TABLE: "a table ([name] with keys under it)",
         TILES: "a list of [rows, columns] pairs of whole numbers, e.g. [[256, 128], [128, 128]]"}


def _is(kind: str, value) -> bool:
    if kind == NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == BOOLEAN:
        return isinstance(value, bool)
    if kind == STRING:
        return isinstance(value, str)
    if kind == TILES:
        return (isinstance(value, list) and len(value) > 0
                and all(isinstance(t, list) and len(t) == 2 and all(_is(INTEGER, x) and x > 0 for x in t)
                        for t in value))
    raise AssertionError(kind)


def _toml_type(value) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def check_profile_types(d, schema: dict = SCHEMA, where: str = "") -> None:
    """Raise ValueError naming the first key of `d` whose value has the wrong type."""
    if not isinstance(d, dict):
        raise ValueError(f"{where or 'the profile'} must be {_WHAT[TABLE]}, got {_toml_type(d)} {d!r}")
    for key, kind in schema.items():
        if key not in d:
            continue
        name, value = f"{where}.{key}" if where else key, d[key]
        if isinstance(kind, dict):
            if not isinstance(value, dict):
                raise ValueError(f"{name} must be {_WHAT[TABLE]}, got {_toml_type(value)} {value!r}")
            check_profile_types(value, kind, name)
        elif not _is(kind, value):
            raise ValueError(f"{name} must be {_WHAT[kind]}, got {_toml_type(value)} {value!r}")
