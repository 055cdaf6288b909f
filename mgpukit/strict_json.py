"""Strict JSON: what mgpukit writes, any JSON reader can read back.

`to_json` writes strict JSON (`allow_nan=False`). Python's `json` writes NaN and ±inf as bare
`NaN` / `Infinity` tokens that other JSON readers refuse; a non-finite float is written as the
string "NaN", "Infinity" or "-Infinity" instead, and `from_json` turns those back. Tensors, numpy
arrays and dataclasses are written as their values. Standard library only: the cost model writes
through it too (files reach disk whole through `mgpukit.files`).
"""

from __future__ import annotations

import json
import math

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite(value):
    """`value` with every non-finite float replaced by its NON_FINITE name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _default(value):
    if hasattr(value, "tolist"):  # tensors, numpy arrays
        return _finite(value.tolist())
    if hasattr(value, "item"):
        return _finite(value.item())
    if dataclass_fields := getattr(value, "__dataclass_fields__", None):
        return _finite({k: getattr(value, k) for k in dataclass_fields})
    return str(value)


def to_json(value, **kwargs) -> str:
    """Strict JSON of `value`: non-finite floats become "NaN" / "Infinity" / "-Infinity"."""
    return json.dumps(_finite(value), allow_nan=False, default=_default, **kwargs)


def _restore(value):
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v) for v in value]
    return value


def from_json(text: str):
    """Read what `to_json` wrote, with the non-finite floats back as floats."""
    return _restore(json.loads(text))
