"""One schema for the kit's input files: model files (`data/models/*.toml`) and hardware
profiles (`data/hardware/*.toml`), checked before any figure is used.

A TOML file is a nested table; the schema is a dict of the same shape whose leaves are `Field`s:
the value's kind (number, whole number, true/false, string, list of tiles), its range, whether
it must be there. `check_schema` walks both at once and refuses, in one sentence naming the key,

- a key the schema does not know (a typo like ``fowrard`` would otherwise be ignored and the
  default used, silently),
- a missing required key,
- a value of the wrong kind — never coerced: ``gpus_per_node = 1.5`` is not 1, ``async = "no"``
  is not true,
- a value that is not finite, or outside its range. The ranges are *sane maxima*, wide enough
  for any real machine or published model, narrow enough that arithmetic on them stays finite
  and fast: a link latency of 1e300 s, a memory of 1e-300 bytes or a model of 2^63 layers are
  mistakes, and a planner that searches over layers would run for hours on the last.

Why not coerce and clamp: a figure a learner typed wrong should be shown back, not quietly
replaced by a different one. No torch here: `mgpukit plan` reads these files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NUMBER, INTEGER, BOOLEAN, STRING, TILES = "number", "integer", "boolean", "string", "tiles"

_WHAT = {NUMBER: "a number", INTEGER: "a whole number (no decimal point)", BOOLEAN: "true or false",
         STRING: "a quoted string",
         TILES: "a list of [rows, columns] pairs of whole numbers, e.g. [[256, 128], [128, 128]]"}
_TABLE = "a table ([name] with keys under it)"


@dataclass(frozen=True)
class Field:
    """One leaf of a schema. `low`/`high`: the inclusive range (`low_open`: `low` excluded);
    for strings, the range of the length; `choices`: the only values allowed."""

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    required: bool = False
    choices: tuple = ()

    def problem(self, value) -> str | None:
        """What is wrong with `value` (the end of a sentence), or None."""
        if not _is(self.kind, value):
            return f"must be {_WHAT[self.kind]}, got {_toml_type(value)} {_short(value)}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(map(repr, self.choices))}, got {_short(value)}"
        if self.kind == STRING:
            if self.low is not None and len(value) < self.low:
                return "must not be empty" if self.low == 1 else f"must have at least {self.low} characters"
            if self.high is not None and len(value) > self.high:
                return f"is {len(value)} characters long; at most {self.high}"
            return None
        if self.kind == TILES:
            big = [x for t in value for x in t if self.high is not None and x > self.high]
            return f"has a tile side {big[0]}; at most {self.high}" if big else None
        if self.kind in (NUMBER, INTEGER):
            if isinstance(value, float) and not math.isfinite(value):
                return f"must be a finite number, got {value}"
            too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
            too_high = self.high is not None and value > self.high
            if too_low or too_high:
                return f"= {_short(value)} is out of range: {self._range()}"
        return None

    def _range(self) -> str:
        low = "" if self.low is None else f"{'>' if self.low_open else '>='} {_number(self.low)}"
        high = "" if self.high is None else f"<= {_number(self.high)}"
        return f"must be {' and '.join(x for x in (low, high) if x)}"


def _number(x) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) < 10**7 else f"{x:g}"


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


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_schema(d, schema: dict, where: str = "", *, what: str = "the file") -> None:
    """Raise ValueError naming the first key of `d` that `schema` refuses (see the module)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where or what} must be {_TABLE}, got {_toml_type(d)} {_short(d)}")
    unknown = [k for k in d if k not in schema]
    if unknown:
        place = f" in [{where}]" if where else ""
        raise ValueError(f"unknown key {unknown[0]!r}{place}; the keys {'it' if where else what} may "
                         f"hold are {', '.join(schema)}")
    for key, rule in schema.items():
        name = f"{where}.{key}" if where else key
        if key not in d:
            if isinstance(rule, Field) and rule.required:
                raise ValueError(f"{name} is missing (required)")
            continue
        if isinstance(rule, dict):
            if not isinstance(d[key], dict):
                raise ValueError(f"{name} must be {_TABLE}, got {_toml_type(d[key])} {_short(d[key])}")
            check_schema(d[key], rule, name, what=what)
        elif (problem := rule.problem(d[key])) is not None:
            raise ValueError(f"{name} {problem}")
