"""The training framework as an input of the planner: how an implementation runs a layout.

The same layout runs at different speeds in different frameworks. What differs is mostly
*mechanism*, and each is stated with where it is documented:

* ``dp_sync``: when the data-parallel gradient sync runs. ``overlapped``: bucket by bucket during
  the backward (PyTorch DDP, Li et al. 2020; Megatron-Core ``--overlap-grad-reduce``; FSDP's
  asynchronous reduce-scatter). ``after-flush``: all of it after the pipeline's last backward,
  nothing overlapped (Megatron-LM's 2021 ``LocalDDP``, Narayanan et al. 2021; DeepSpeed's
  pipeline engine, whose ``TrainSchedule`` issues ``ReduceGrads`` after the last micro-batch).
* ``pp_scatter_gather``: Megatron-LM sends ``1/tp`` of each activation between pipeline stages
  and all-gathers it inside the node (Narayanan et al. 2021, §4.1); DeepSpeed's pipeline engine
  and ``torch.distributed.pipelining`` send the whole tensor from every tp rank.
* ``schedules``: the pipeline schedules it offers (DeepSpeed's engine: 1F1B only; Megatron:
  1F1B and interleaved); the search keeps to them.
* ``autocast``: 16-bit compute through ``torch.autocast`` over fp32 weights (torch AMP, as the
  kit's own loop and Composer's ``amp_bf16``): fp32 residual stream and norms and a cast per
  linear input move more bytes than a model kept in 16 bits (Megatron, FSDP's ``param_dtype``).
* ``tp_overlap``: whether it can hide tensor-parallel collectives behind the layer's GEMMs
  (Megatron-Core with Transformer Engine's userbuffers, ``--tp-comm-overlap``; Wang et al. 2022,
  "Overlap Communication with Dependent Computation via Decomposition"); the search tries it.
* ``overlap_p2p``: whether the interleaved schedule's pipeline sends and receives run beside the
  compute (issued before a chunk runs, waited on after it): Megatron-LM's ``overlap_p2p_comm``, on
  by default (the training CLI's ``--no-overlap-p2p-communication`` turns it off; forced off for
  the non-interleaved schedules). Megatron-LM 2021 (Narayanan et al. §4.1) waited on each send.
* ``kernel_efficiency``: how fast its kernels run relative to Megatron-LM's fused kernels, on
  which the profiles' GEMM tables were fitted (Megatron-LM Table 1: 1.0 by construction). Where
  no measurement isolates it, the value is a *fit* over the framework's published runs, said so
  in its file, and checked on runs it was not fitted on (:mod:`mgpukit.costmodel.published`).

Frameworks are files in ``data/frameworks/`` (``megatron-core.toml`` ...), each citing its
sources. No torch here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

DP_SYNC = ("overlapped", "after-flush")
DEFAULT = "megatron-core"


@dataclass(frozen=True, kw_only=True)
class Framework:
    """One implementation's mechanisms (module docstring)."""

    name: str
    description: str = ""
    dp_sync: str = "overlapped"
    pp_scatter_gather: bool = True
    schedules: tuple[str, ...] = ("1f1b", "gpipe", "zb-h1", "interleaved")
    kernel_efficiency: float = 1.0
    autocast: bool = False  # 16-bit layouts under torch.autocast with fp32 weights (steptime._autocast_bytes)
    tp_overlap: bool = False  # offers tp collectives overlapped with the GEMMs (the search tries it)
    overlap_p2p: bool = False  # the interleaved schedule's p2p runs beside the next chunk's compute
    validated_by: tuple[str, ...] = ()  # frameworks whose published runs give this one's error bar (default: itself)
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.dp_sync not in DP_SYNC:
            raise ValueError(f"framework {self.name!r}: dp_sync = {self.dp_sync!r}; choose one of {', '.join(DP_SYNC)}")
        if not 0 < self.kernel_efficiency <= 1.5:
            raise ValueError(f"framework {self.name!r}: kernel_efficiency = {self.kernel_efficiency} must be in (0, 1.5]")
        object.__setattr__(self, "schedules", tuple(self.schedules))
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "validated_by", tuple(self.validated_by))

    @property
    def overlap_dp(self) -> bool:
        return self.dp_sync == "overlapped"

    def with_(self, **changes) -> "Framework":
        """A copy with some fields changed (``fw.with_(dp_sync="after-flush")``)."""
        return replace(self, **changes)

    def on(self, profile):
        """``profile`` as this framework's kernels see it: GEMM rate and HBM bandwidth scaled by
        ``kernel_efficiency`` (the profile itself when it is 1)."""
        if self.kernel_efficiency == 1.0:
            return profile
        k = self.kernel_efficiency
        gemm = replace(profile.gemm, efficiency=min(1.0, profile.gemm.efficiency * k)) if profile.gemm else None
        return replace(profile, gemm=gemm, compute_efficiency=min(1.0, profile.compute_efficiency * k),
                       memory_bandwidth=profile.memory_bandwidth * k)


def frameworks_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "data" / "frameworks"


@lru_cache(maxsize=None)
def _shipped() -> dict[str, Framework]:
    out = {}
    for path in sorted(frameworks_dir().glob("*.toml")):
        with open(path, "rb") as f:
            d = tomllib.load(f)
        try:
            out[path.stem] = Framework(**{"name": path.stem, **d})
        except TypeError as e:
            raise ValueError(f"framework file {path}: {e}") from None
    return out


def list_frameworks() -> list[str]:
    return list(_shipped())


def get_framework(framework: "str | Framework | None" = None) -> Framework:
    """A shipped framework by name (``data/frameworks/<name>.toml``), ``framework`` itself, or
    the default (:data:`DEFAULT`) for None."""
    if isinstance(framework, Framework):
        return framework
    name = DEFAULT if framework is None else str(framework)
    try:
        return _shipped()[name]
    except KeyError:
        raise ValueError(f"unknown framework {name!r}; choose one of {', '.join(list_frameworks())}") from None
