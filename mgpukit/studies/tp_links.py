"""Why a tp group stays inside a node: the same GPU over three links (notebook 05, `mgpukit
bench tp`, notebook 10's claims).

- `LINKS` / `link_profile`  an H100's profile with only its tp link changed (NVLink, PCIe, InfiniBand)
- `predicted_tp_step`       the cost model's step (`costmodel.step_time`) of `tp` ranks over a link
- `link_table`              the alpha and beta each link gives a tp group
"""
from __future__ import annotations

import dataclasses
import statistics

from mgpukit.config import RunConfig
from mgpukit.costmodel import get_shape, load_profile, step_time
from mgpukit.costmodel.comm import link_for_ranks
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import ModelShape


PCIE = "PCIe (h100-pcie's link, the same SXM GPU)"


LINKS = {"NVLink (h100-nvlink)": ("h100-nvlink", None, None), PCIE: ("h100-nvlink", None, "h100-pcie"),
         "InfiniBand across nodes (h100-ib, 1 GPU/node)": ("h100-ib", 1, None)}


def link_profile(link: str):
    """The hardware profile behind a LINKS key. Only the link changes between them, never the
    GPU: the PCIe entry is the SXM H100 of ``h100-nvlink`` with the ``h100-pcie`` profile's
    intra-node link (that profile is the H100 PCIe *card*, 24 % less bf16 peak and 40 % less HBM
    bandwidth, which would put a GPU gap into a link comparison — even at tp = 1); the
    InfiniBand entry is ``h100-ib`` with one GPU per node (every tp group crosses the network)."""
    name, per_node, link_of = LINKS[link]
    hw = load_profile(name)
    if link_of:
        hw = dataclasses.replace(hw, intra_node=load_profile(link_of).intra_node, name=f"{name} with {link_of}'s link")
    if per_node:
        hw = dataclasses.replace(hw, gpus_per_node=per_node, name=f"{name}, {per_node} GPU/node")
    return hw


def tp_link(link: str):
    """The link a tp group of 2+ ranks runs on under `link` (`costmodel.comm.link_for_ranks`)."""
    return link_for_ranks((0, 1), link_profile(link))


def link_table() -> list[dict]:
    """Per LINKS key: the alpha (latency per message) and beta (bytes/s) a tp group gets, as the
    profiles in `data/hardware/` give them — the numbers the figures below are made of."""
    return [{"link": k, "alpha_s": tp_link(k).alpha, "beta": tp_link(k).beta} for k in LINKS]


def predicted_tp_step(model: str, tp: int, link: str, *, global_batch: int = 8, sp: bool = False,
                   kernels_only: bool = True, dtype: str = "fp32") -> dict:
    """The analytic step time (`costmodel.step_time`) of `tp` ranks over `link` (a LINKS key).
    ``kernels_only`` (default, as `emulated_run`'s): kernels and messages alone; False: the
    host's launches too (``launch_bound`` in the result says how much of the step they set)."""
    hw = link_profile(link)
    hw = hw.kernels_only() if kernels_only else hw
    return step_time(shape_of(model), Layout(tp=tp, sp=sp, micro_batch=global_batch, dtype=dtype), hw)


def explorer_dtype(model: str) -> str:
    """The precision `tp_explorer` plans ``model`` in: fp32 for the kit's own runnable models
    (gpt-tiny, gpt2-124m: what its CPU runs use), bf16 for a shipped model shape (how 1.3B-70B
    models train; in fp32 their GEMMs run on the CUDA cores, ~15× slower, and tp's messages
    would look nearly free beside them)."""
    try:
        RunConfig(model=model)
        return "fp32"
    except ValueError:
        return "bf16"


def shape_of(model: str) -> ModelShape:
    """A kit model's shape (gpt-tiny, gpt2-124m) or a shipped one (`data/models/`)."""
    try:
        return ModelShape.from_gpt_config(RunConfig(model=model).model_config())
    except ValueError:
        return get_shape(model)


def steady_step(record: dict) -> float:
    """A record's step time without its first (warm-up) step, median."""
    return statistics.median(record["step_time_s"][1:] or record["step_time_s"])


