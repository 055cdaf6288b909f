"""Alpha-beta cost of collectives: how long a ring algorithm takes on a link.

The alpha-beta (Hockney) model charges ``alpha + bytes / beta`` for one message. Ring
collectives (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
workstations"; Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
operations in MPICH") move the data in ``n - 1`` steps of ``bytes / n`` each:

==================  =============================================
collective          time for ``nbytes`` (the full buffer) on ``n`` ranks
==================  =============================================
all-reduce          ``2(n-1)/n · nbytes/beta + 2(n-1)·alpha``
reduce-scatter      ``(n-1)/n · nbytes/beta + (n-1)·alpha``
all-gather          ``(n-1)/n · nbytes/beta + (n-1)·alpha``  (nbytes = gathered size)
broadcast           ``nbytes/beta + (n-1)·alpha``  (pipelined chain, as NCCL runs it)
send / recv         ``alpha + nbytes/beta``
==================  =============================================

``beta`` is the per-GPU unidirectional bus bandwidth: the bandwidth factors above (2(n-1)/n,
(n-1)/n, 1) are exactly the ones nccl-tests uses to turn a time into "busbw"
(NVIDIA/nccl-tests, doc/PERFORMANCE.md). These functions are pure and take any ``link`` with ``alpha``
and ``beta`` attributes: the emulator's virtual clock uses them too.
"""

from __future__ import annotations

from mgpukit.costmodel.hardware import HardwareProfile, Link


def _check(n: int) -> None:
    if n < 1:
        raise ValueError(f"a collective needs at least 1 rank, got n={n}")


def allreduce_time(nbytes: float, n: int, link) -> float:
    """Ring all-reduce: a reduce-scatter then an all-gather, ``2(n-1)`` steps."""
    _check(n)
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / link.beta + 2 * (n - 1) * link.alpha


def reduce_scatter_time(nbytes: float, n: int, link) -> float:
    """Ring reduce-scatter of an ``nbytes`` buffer; each rank ends with ``nbytes / n``."""
    _check(n)
    if n == 1:
        return 0.0
    return (n - 1) / n * nbytes / link.beta + (n - 1) * link.alpha


def allgather_time(nbytes: float, n: int, link) -> float:
    """Ring all-gather whose *output* is ``nbytes`` (each rank contributes ``nbytes / n``)."""
    return reduce_scatter_time(nbytes, n, link)


def broadcast_time(nbytes: float, n: int, link) -> float:
    """Pipelined chain broadcast: the buffer streams through ``n - 1`` hops in small chunks."""
    _check(n)
    if n == 1:
        return 0.0
    return nbytes / link.beta + (n - 1) * link.alpha


def p2p_time(nbytes: float, link) -> float:
    """One point-to-point message: ``alpha + nbytes / beta``."""
    return link.alpha + nbytes / link.beta


# ---------------------------------------------------------------- which link a group uses


def link_for_ranks(ranks, profile: HardwareProfile) -> Link:
    """The link a group of global ``ranks`` runs on (ranks fill nodes in order).

    Inside one node: ``intra_node``. Across nodes a ring crosses the network, but a group with
    ``k`` members on each node runs ``k`` rings at once over ``k`` NICs (one per GPU, as on
    DGX/rail-optimised clusters), so ``beta = min(intra.beta, k · inter.beta)`` and alpha is the
    network's.
    """
    ranks = list(ranks)
    per_node: dict[int, int] = {}
    for r in ranks:
        per_node[r // profile.gpus_per_node] = per_node.get(r // profile.gpus_per_node, 0) + 1
    if len(per_node) <= 1:
        return profile.intra_node
    k = min(per_node.values())
    return Link(alpha=profile.inter_node.alpha, beta=min(profile.intra_node.beta, k * profile.inter_node.beta))


def group_link(profile: HardwareProfile, size: int, stride: int = 1) -> Link:
    """The link of a group of ``size`` ranks spaced ``stride`` apart, starting at rank 0.

    With Megatron's rank order (tp fastest, then dp, then pp) the tp group has stride 1,
    the dp group stride ``tp`` and the pp group stride ``tp · dp``.
    """
    return link_for_ranks(range(0, size * stride, stride), profile)
