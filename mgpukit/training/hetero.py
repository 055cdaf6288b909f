"""Heterogeneous data parallelism: unequal batches for unequal ranks, the same gradient.

Synchronous data parallelism waits for its slowest rank every step (`straggler.py`). When the
ranks are unequal *by construction* — a cluster mixing A100s and H100s, a throttled GPU — the
cure is to give each rank a share of the global batch proportional to its speed, so that they
all finish backward together (Jia et al. 2018, "Beyond Data and Model Parallelism"; Narayanan
et al. 2020, "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads";
HetPipe, Park et al. 2020). The trap is the average: rank i's loss is the mean over its
`b_i` rows, so the plain average of the ranks' gradients weights a row of a small shard more
than a row of a large one. The global batch's gradient is the *weighted* average

    g = Σ_i (b_i / B) · g_i          (B = Σ_i b_i)

Here each rank multiplies its loss (hence its gradient) by `w_i = n · b_i / B` before backward;
the unchanged data-parallel average `(1/n) Σ_i w_i g_i` is then exactly `g`, whichever sync
runs it (dp-naive, dp-bucketed, DDP, ZeRO), and the loss the trainer logs (the mean over ranks
of the weighted losses) is the global batch's mean loss.

Knobs (trainer knobs, every data-parallel strategy):

- `batch_split="24,8"`: rows of the global batch per dp rank (`batch_split.py`, in the core: the
  loader and the loss weight read it).
- `rank_profiles="a100-nvlink,h100-nvlink"` (emulated only): the *compute* profile of each rank
  (peak FLOP/s, memory bandwidth, efficiency, dispatch overhead); links stay the launch
  profile's, so every rank prices a collective the same way. A mixed cluster on one clock
  (`RankProfiles`, a hook the experiment installs: `VirtualClock.compute_as`).

`split_by_speed` picks a split from measured seconds per row (a throttled CPU rank, timed);
`balanced_split` picks the split from the analytic step model (`costmodel.gpt_step`): rows
handed out one micro-batch at a time to the rank that would finish soonest, which minimises
the slowest rank's time; `predicted_mixed_step` is that model's step time for a split.
"""
from __future__ import annotations

from mgpukit.costmodel.gpt_step import ddp_step_time
from mgpukit.costmodel.hardware import load_profile
from mgpukit.measure.vclock import compute_of
from mgpukit.training.hooks import Hook


def parse_profiles(spec) -> tuple[str, ...] | None:
    if not spec:
        return None
    return tuple(p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec))


def check_profiles(cfg, dims, mode: str) -> None:
    """Refuse per-rank profiles that cannot work (ValueError saying what to change); the split's
    own refusals are `batch_split.check_batch_split`'s."""
    profiles = parse_profiles(cfg.options.get("rank_profiles"))
    if profiles is not None:
        if mode != "emulated":
            raise ValueError("rank_profiles prices each rank's compute on the virtual clock; use "
                             "mode='emulated' (measured runs: the `straggler` knob throttles a rank).")
        if len(profiles) != dims.world_size:
            raise ValueError(f"rank_profiles names {len(profiles)} profiles for {dims.world_size} ranks.")
        for name in profiles:
            load_profile(name)  # an unknown one fails here, naming the known ones


class RankProfiles(Hook):
    """Installed by `rank_profiles` (emulated): this rank's clock computes as its entry of
    `profiles` does, links unchanged (`VirtualClock.compute_as`)."""

    def __init__(self, profiles: tuple[str, ...]):
        self.profiles = profiles

    def on_train_start(self, loop):
        rec = loop.rec
        if not rec.clock.emulated:
            return
        name = self.profiles[loop.ctx.rank]
        rec.clock.compute_as(load_profile(name))
        rec.extra["compute_profile"] = name


# ---------------------------------------------------------------- the analytic side


def rank_times(cfg, split, profiles, link_profile) -> list[dict]:
    """Per rank: predicted seconds before its gradients are ready (forward, backward, DDP's
    copy into the bucket) and after the all-reduce (copy back, optimizer), on its profile —
    its kernels only (`HardwareProfile.kernels_only`: no host launches, no minimum kernel time),
    as the mixed-cluster lesson emulates it: a tiny model's launches, the same on both kinds of
    GPU, would hide the difference in compute the split is about."""
    base = load_profile(link_profile).kernels_only()
    n = len(split)
    out = []
    for b, name in zip(split, profiles):
        p = compute_of(base, load_profile(name))
        t = ddp_step_time(cfg.model_config(), global_batch=b * n, workers=n, profile=p)
        copies = t["ddp_copies_s"]
        out.append({"rows": b, "profile": name, "before_s": t["forward_s"] + t["backward_s"] + copies * 2 / 3,
                    "after_s": copies / 3 + t["optimizer_s"], "allreduce_s": t["exposed_comm_s"]})
    return out


def predicted_mixed_step(cfg, split, profiles, link_profile) -> float:
    """Synchronous DP (DDP, one bucket) with unequal ranks: the all-reduce starts when the
    slowest rank's gradients are ready; the step ends when the slowest rank has stepped."""
    times = rank_times(cfg, split, profiles, link_profile)
    ready = max(t["before_s"] for t in times)
    comm = max(t["allreduce_s"] for t in times)
    return ready + comm + max(t["after_s"] for t in times)


def balanced_split(cfg, profiles, link_profile) -> tuple[int, ...]:
    """Rows per rank minimising the slowest rank's predicted compute: hand out the global
    batch one micro-batch (`cfg.micro_batches` rows) at a time to the rank that would then
    finish soonest. Every rank gets at least one micro-batch."""
    return _hand_out(cfg.global_batch, len(profiles), cfg.micro_batches, "whole micro-batches of {k}",
                     lambda i, s: rank_times(cfg, s, profiles, link_profile)[i]["before_s"])


def split_by_speed(global_batch: int, seconds_per_row, unit: int = 1) -> tuple[int, ...]:
    """Rows per rank from each rank's measured compute seconds per row (rank i then computes
    for about `b_i · seconds_per_row[i]`): the same greedy hand-out as `balanced_split`, `unit`
    rows at a time (a multiple of `micro_batches`) to the rank that would finish soonest,
    every rank at least one unit."""
    if any(not s > 0 for s in seconds_per_row):
        raise ValueError(f"seconds_per_row={seconds_per_row!r}: every rank needs a positive time per row.")
    return _hand_out(global_batch, len(seconds_per_row), unit, "whole units of {k} rows",
                     lambda i, s: s[i] * seconds_per_row[i])


def _hand_out(global_batch: int, n: int, k: int, what: str, finish) -> tuple[int, ...]:
    """Every rank starts with `k` rows; the rest go `k` at a time to the rank `i` whose
    `finish(i, split with k more rows on i)` is least (the slowest rank's time, minimised)."""
    if global_batch % k or global_batch < n * k:
        raise ValueError(f"global_batch={global_batch} cannot give {n} ranks {what.format(k=k)}.")
    split = [k] * n

    def trial(i: int) -> float:
        s = split.copy()
        s[i] += k
        return finish(i, s)

    for _ in range((global_batch - n * k) // k):
        split[min(range(n), key=trial)] += k
    return tuple(split)
