"""The hooks a run's knobs install: what a lesson adds around the one loop, in one place.

The core — `prepare`, `parallelize`, the model and batch builders, the trainer — names no lesson.
A knob that asks for one (notebook 10's straggler, mixed cluster and backup workers, notebook 01's
learning-rate rule, the idle marking of notebooks 01 and 10) turns into a `Hook` here
(`hooks_for`), and is refused here when it cannot work (`check_knobs`, which `prepare` calls before
anything starts):

- `straggler={"rank": r, "factor": f}`  `straggler.Straggle`: one rank computes f× slower
- `rank_profiles="a100-nvlink,…"`       `hetero.RankProfiles`: a mixed cluster, emulated
- `lr_scaling="linear"`                 `lr_scaling.LrSchedule`: Goyal et al.'s rule and warm-up
- `drop_slowest=k`                      `backup.DropSlowest`: the k slowest ranks skip their compute
- `show_idle=True` (or a straggler)     `straggler.MarkIdle`: the wait for the slowest rank, drawn
"""
from __future__ import annotations

from mgpukit.config import RunConfig
from mgpukit.training.backup import DropSlowest, check_drop_slowest
from mgpukit.training.batch_split import parse_split
from mgpukit.training.hetero import RankProfiles, check_profiles, parse_profiles
from mgpukit.training.hooks import Hook
from mgpukit.training.lr_scaling import LrSchedule
from mgpukit.training.straggler import MarkIdle, Straggle, Straggler


def check_knobs(cfg: RunConfig, dims, mode: str, strategy: str) -> None:
    """Refuse a lesson knob that cannot work in this run (ValueError saying what to change)."""
    Straggler.from_options(cfg.options, dims.world_size)  # the slow rank is one of this run's
    check_profiles(cfg, dims, mode)  # per-rank profiles: emulated, one per rank
    check_drop_slowest(cfg, dims, strategy)  # dropping the slowest ranks


def hooks_for(cfg: RunConfig, world_size: int) -> list[Hook]:
    """The hooks the run's knobs ask for, in the order they run at each point (`training/hooks.py`):
    what a lesson adds around the one loop. Checkpoints (`checkpoint.checkpointing`) and the
    progress bar are installed beside them by `experiment._train_unguarded`."""
    o = cfg.options
    straggler = Straggler.from_options(o, world_size)
    hooks: list[Hook] = []
    if straggler is not None:  # one rank computes `factor`x slower (training/straggler.py)
        hooks.append(Straggle(straggler))
    if o.get("rank_profiles"):  # a mixed cluster, emulated (training/hetero.py)
        hooks.append(RankProfiles(parse_profiles(o["rank_profiles"])))
    if o.get("lr_scaling") not in (None, "none"):  # Goyal et al.'s rule (training/lr_scaling.py)
        hooks.append(LrSchedule())
    if o.get("drop_slowest"):  # backup workers (training/backup.py)
        hooks.append(DropSlowest(int(o["drop_slowest"]), parse_split(o.get("batch_split"))))
    if straggler is not None or o.get("show_idle"):  # the wait for the slowest rank, drawn
        hooks.append(MarkIdle())
    return hooks
