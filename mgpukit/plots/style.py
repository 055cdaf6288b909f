"""Colours, units and source labels shared by every mgpukit figure.

A figure must say where its numbers come from (docs/ARCHITECTURE.md, "Four clocks"):

- a record run in mode ``cpu`` or ``gpu`` was **measured** (wall clock / CUDA events);
- a record run in mode ``emulated`` was timed by the **virtual clock** of a hardware profile;
- numbers from the cost model are **predicted**.

``source_kind`` gives the one-word class used in tables; ``source_label`` the phrase used
in titles and legends. Everything here is pure: no printing, no training.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Record = Mapping[str, Any]

# One colour per timeline kind, used by every figure (Gantt, legends, comm bars).
# Compute is blue/orange/red/yellow/green, collectives purple/brown/teal, p2p pinks,
# idle a light grey so it reads as "nothing happened" next to real work.
KIND_COLORS: dict[str, str] = {
    "fwd": "#4C78A8",
    "bwd": "#F58518",
    "bwd_input": "#E45756",
    "bwd_weight": "#EECA3B",
    "opt": "#54A24B",
    "all_reduce": "#B279A2",
    "reduce_scatter": "#9D755D",
    "all_gather": "#72B7B2",
    "send": "#FF9DA6",
    "recv": "#D37295",
    "idle": "#D9D9D9",
    "wait": "#BDBDBD",  # emulated: the stream waits for a collective or a message
    "launch": "#9ECAE9",  # emulated GPUs, "host" row: the host issuing a region's kernels
    "data": "#BCBD22",
}

# Communication whose group spans nodes (an event with "inter_node": True) — it ran on the
# network, not the node's own links — is drawn in this colour, hatched, whatever its kind.
INTER_NODE_COLOR = "#A50F15"

# Kinds not in KIND_COLORS (broadcast, all_to_all, ...) get a stable colour from here,
# chosen by a checksum of the name so a kind keeps its colour across figures and sessions.
_FALLBACK_COLORS = ("#8C6D31", "#393B79", "#637939", "#843C39", "#7B4173", "#3182BD", "#31A354")

# Memory categories, bottom to top of a stacked bar.
MEMORY_CATEGORIES: tuple[str, ...] = ("params", "grads", "optimizer", "activations")
MEMORY_COLORS: dict[str, str] = {
    "params": "#4C78A8",
    "grads": "#F58518",
    "optimizer": "#54A24B",
    "activations": "#B279A2",
}

# Same colours for the same strategy in every multi-record chart of one session.
_SERIES_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9D755D", "#EECA3B")

PREDICTED = "predicted (cost model)"
_MEASURED_MODES = ("cpu", "gpu")


def kind_color(kind: str) -> str:
    """Colour of a timeline kind; unknown kinds get a stable fallback colour."""
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    return _FALLBACK_COLORS[zlib.crc32(kind.encode()) % len(_FALLBACK_COLORS)]


def series_color(i: int) -> str:
    """Colour of the i-th record in a multi-record chart."""
    return _SERIES_COLORS[i % len(_SERIES_COLORS)]


def source_kind(record: Record) -> str:
    """"measured", "emulated" or "predicted" — the class of the record's numbers.

    Raises ValueError for an unknown mode rather than guess: a wrong label is worse than none.
    """
    mode = record.get("mode")
    if mode in _MEASURED_MODES:
        return "measured"
    if mode == "emulated":
        return "emulated"
    if mode in ("analytic", "predicted"):
        return "predicted"
    raise ValueError(
        f"record has mode {mode!r}; expected 'cpu', 'gpu', 'emulated' or 'analytic' "
        "so the figure can say whether its numbers are measured, emulated or predicted"
    )


def source_label(record: Record) -> str:
    """Where the record's numbers come from, as a phrase for titles and legends.

    >>> source_label({"mode": "cpu"})
    'measured (cpu)'
    >>> source_label({"mode": "emulated", "profile": "h100-nvlink"})
    'emulated (virtual clock, profile h100-nvlink)'
    >>> source_label({"mode": "emulated", "profile": "h100-nvlink", "shape": True,
    ...               "config": {"model": "gpt2-124m"}})
    'emulated (virtual clock, profile h100-nvlink, shape mode gpt2-124m)'
    """
    kind = source_kind(record)
    if kind == "measured":
        return f"measured ({record['mode']})"
    if kind == "emulated":
        # shape mode (fake tensors at real scale) says so, with the model: its numbers are of a
        # model this machine never held
        shape = f", shape mode {record.get('config', {}).get('model', '?')}" if record.get("shape") else ""
        prof = record.get("profile") or "unknown"   # the lab's unit time is no hardware's profile
        return f"emulated (virtual clock, {prof if prof.startswith('unit time') else 'profile ' + prof}{shape})"
    return PREDICTED


def sources_title(records: Iterable[Record]) -> str:
    """The distinct source labels of several records, for a title: 'measured (cpu) vs emulated (...)'."""
    labels: list[str] = []
    for r in records:
        label = source_label(r)
        if label not in labels:
            labels.append(label)
    return " vs ".join(labels)


def record_name(record: Record) -> str:
    """Short name for legends: 'ddp ×2', or 'hybrid ×8 (dp2·tp2·pp2)' when several axes are used."""
    if record.get("label"):
        return str(record["label"])
    name = f"{record.get('strategy', '?')} ×{record.get('world_size', '?')}"
    dims = record.get("dims") or {}
    used = {axis: size for axis, size in dims.items() if size and size > 1}
    if len(used) > 1:
        name += " (" + format_dims(dims) + ")"
    return name


def series_names(records: Sequence[Record], *, with_source: bool) -> list[str]:
    """Legend names for several records, made unique ('ddp ×2 #2') when two runs share a name."""
    names = [record_name(r) + (f" — {source_label(r)}" if with_source else "") for r in records]
    counts = {n: names.count(n) for n in names}
    seen: dict[str, int] = {}
    unique = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        unique.append(f"{n} #{seen[n]}" if counts[n] > 1 else n)
    return unique


def format_dims(dims: Mapping[str, int] | None) -> str:
    """{'dp': 2, 'tp': 1, 'pp': 1} -> 'dp2·tp1·pp1'."""
    if not dims:
        return ""
    return "·".join(f"{axis}{size}" for axis, size in dims.items())


def as_records(record_or_records: Record | Sequence[Record]) -> list[Record]:
    """Accept one record or a sequence of records."""
    if isinstance(record_or_records, Mapping):
        return [record_or_records]
    records = list(record_or_records)
    if not records:
        raise ValueError("no records given")
    return records


_BYTE_UNITS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B"))


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """(divisor, name) that shows max_bytes as a number between 1 and 1024."""
    for scale, name in _BYTE_UNITS:
        if max_bytes >= scale:
            return scale, name
    return 1, "B"


def time_unit(span_s: float) -> tuple[float, str]:
    """(multiplier, name) that shows a time span in s, ms or µs."""
    if span_s >= 1:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def format_bytes(n: float | None) -> str:
    """1536 -> '1.50 KiB'; None -> '—'."""
    if n is None:
        return "—"
    scale, name = byte_unit(abs(n))
    return f"{n / scale:.2f} {name}" if scale > 1 else f"{n:.0f} B"


def percent(fraction: float, digits: int = 0) -> str:
    """A share as a percentage, without the "-0%" a tiny negative rounds to: -0.001 -> '0%'."""
    text = f"{fraction:.{digits}%}"
    return text[1:] if text.startswith("-") and float(text[1:-1]) == 0 else text


def format_time(seconds: float | None, digits: int = 3) -> str:
    """A duration with the unit that suits it: 3.2e-5 -> '32 µs', 0.0281 -> '28.1 ms'; None -> '—'.

    An emulated GPU step lasts microseconds and a measured CPU step milliseconds: one fixed
    unit shows one of them as '0.04 ms'.
    """
    if seconds is None:
        return "—"
    mult, unit = time_unit(abs(seconds)) if seconds else (1e3, "ms")
    if unit == "µs" and abs(seconds) < 1e-9:
        mult, unit = 1e9, "ns"
    return f"{seconds * mult:.{digits}g} {unit}"
