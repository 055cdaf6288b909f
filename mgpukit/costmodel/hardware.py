"""Hardware profiles on disk: where they live, how one is found by name, read and written.

A profile is one TOML file in ``data/hardware/`` (or in the user's cache, where
``mgpukit calibrate`` writes a measured ``this-machine``); what it holds, and the checks on
every figure, are `mgpukit.costmodel.profile`'s. The standard library reads TOML
(``tomllib``) but writes none, so `profile_toml` writes it by hand.

    >>> p = load_profile("h100-nvlink")
    >>> p.flops("bf16"), p.intra_node.beta
"""

from __future__ import annotations

import tomllib
from pathlib import Path

# A profile's types, re-exported: callers outside the cost model take them from here with
# `load_profile` (one import line for "a hardware profile").
from mgpukit.costmodel.profile import (  # noqa: F401
    DTYPES, FP8, OP_CONTEXTS, AttentionModel, GemmModel, HardwareProfile, Link, PeakFlops)

THIS_MACHINE = "this-machine"
THIS_MACHINE_DEFAULT = "this-machine-default"


def data_dir() -> Path:
    """Where the shipped profiles live: ``<repo>/data/hardware``."""
    return Path(__file__).resolve().parents[2] / "data" / "hardware"


def user_profile_dir() -> Path:
    """Where measured profiles live (``mgpukit calibrate`` writes ``this-machine.toml`` here)."""
    return Path.home() / ".cache" / "mgpukit" / "hardware"


class ProfileNotFoundError(ValueError):
    """No profile of that name; the message lists the ones that exist."""


def _search_dirs(search_dirs: list[Path] | None) -> list[Path]:
    return list(search_dirs) if search_dirs is not None else [user_profile_dir(), data_dir()]


def list_profiles(*, search_dirs: list[Path] | None = None) -> list[str]:
    """Names :func:`load_profile` accepts (``this-machine`` always resolves)."""
    names = {THIS_MACHINE}
    for d in _search_dirs(search_dirs):
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def load_profile(name: str, *, search_dirs: list[Path] | None = None) -> HardwareProfile:
    """Load profile ``name`` (or a path to a ``.toml`` file).

    Looks in ``~/.cache/mgpukit/hardware/`` first, then ``data/hardware/``. ``this-machine``
    falls back to the shipped ``this-machine-default`` placeholder until ``mgpukit
    calibrate`` has written a measured one.
    """
    if isinstance(name, HardwareProfile):
        return name
    if not isinstance(name, str):
        raise ProfileNotFoundError(f"hardware profile {name!r}: give a profile's name (e.g. 'h100-nvlink') "
                                   f"or the path of a .toml file.")
    if name.endswith(".toml") or "/" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ProfileNotFoundError(f"no hardware profile file at {path}")
        return _read(path)
    dirs = _search_dirs(search_dirs)
    candidates = [name, THIS_MACHINE_DEFAULT] if name == THIS_MACHINE else [name]
    for candidate in candidates:
        for d in dirs:
            path = d / f"{candidate}.toml"
            if path.is_file():
                return _read(path)
    raise ProfileNotFoundError(
        f"unknown hardware profile {name!r}; available: {', '.join(list_profiles(search_dirs=dirs))} "
        f"(or pass a path to a .toml file)"
    )


def _read(path: Path) -> HardwareProfile:
    try:
        with open(path, "rb") as f:
            return HardwareProfile.from_dict(tomllib.load(f))
    except ValueError as e:  # tomllib.TOMLDecodeError included: name the file to fix
        raise ValueError(f"hardware profile {path}: {e}; fix the file, or delete it "
                         f"(`mgpukit calibrate` writes this-machine again)") from None


def save_profile(profile: HardwareProfile, path: str | Path, *, comment: str = "") -> Path:
    """Write ``profile`` as TOML; ``comment`` lines go at the top (say where the figures
    came from). `mgpukit calibrate` writes `profile_toml` atomically instead."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_toml(profile, comment=comment))
    return path


def profile_toml(profile: HardwareProfile, *, comment: str = "") -> str:
    """``profile`` as TOML text (stdlib has a TOML reader but no writer, hence by hand)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    tables = []
    for key, value in profile.to_dict().items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    while tables:  # a table's sub-tables ([gemm.fp32]) follow it
        key, table = tables.pop(0)
        lines += ["", f"[{key}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
        tables[:0] = [(f"{key}.{k}", v) for k, v in table.items() if isinstance(v, dict)]
    return "\n".join(lines) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"  # repr of a finite float is valid TOML ("2e-06", "370000000000.0")
    escaped = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
