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
all-to-all          ``(n-1)/n · nbytes/beta + (n-1)·alpha``  (pairwise exchange; nbytes = one rank's buffer)
send / recv         ``alpha + nbytes/beta``
==================  =============================================

``beta`` is the per-GPU unidirectional bus bandwidth: the bandwidth factors above (2(n-1)/n,
(n-1)/n, 1) are exactly the ones nccl-tests uses to turn a time into "busbw"
(NVIDIA/nccl-tests, doc/PERFORMANCE.md). These functions are pure and take any ``link`` with ``alpha``
and ``beta`` attributes: the emulator's virtual clock uses them too.
"""

from __future__ import annotations

import math

from collections.abc import Sequence

from mgpukit.costmodel.profile import HardwareProfile, Link

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")


def _check(n: int) -> None:
    if n < 1:
        raise ValueError(f"a collective needs at least 1 rank, got n={n}")


def bus_factor(collective: str, n: int) -> float:
    """Bytes each rank sends in `collective` on `n` ranks, as a fraction of the buffer.

    ``2(n-1)/n`` for a ring all-reduce (a reduce-scatter then an all-gather), ``(n-1)/n`` for a
    ring reduce-scatter or all-gather (``n-1`` steps of ``1/n`` of the buffer). For the ring
    collectives this is nccl-tests' busbw factor. A chain broadcast has ``n-1`` of ``n`` ranks
    forward the whole buffer: ``(n-1)/n`` per rank on average (nccl-tests uses 1 there, the
    busiest link). The one home of these factors: the recorder counts bytes with it, the
    theory modules predict bytes with it, the bandwidth measurements turn times into busbw.
    """
    _check(n)
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather", "broadcast", "all_to_all"):
        return (n - 1) / n
    raise ValueError(f"no bus factor for {collective!r}; choose one of {', '.join(COLLECTIVES)}")


def allreduce_time(nbytes: float, n: int, link) -> float:
    """Ring all-reduce: a reduce-scatter then an all-gather, ``2(n-1)`` steps."""
    _check(n)
    if n == 1:
        return 0.0
    return bus_factor("all_reduce", n) * nbytes / link.beta + 2 * (n - 1) * link.alpha


def reduce_scatter_time(nbytes: float, n: int, link) -> float:
    """Ring reduce-scatter of an ``nbytes`` buffer; each rank ends with ``nbytes / n``."""
    _check(n)
    if n == 1:
        return 0.0
    return bus_factor("reduce_scatter", n) * nbytes / link.beta + (n - 1) * link.alpha


def alltoall_time(nbytes: float, n: int, link) -> float:
    """All-to-all of an ``nbytes`` buffer per rank with equal splits: each rank keeps ``1/n`` and
    sends the other ``n-1`` pieces, one per peer (pairwise exchange, ``n-1`` steps, as NCCL's
    send/recv-based all-to-all). Same bandwidth term as an all-gather of the same buffer."""
    return reduce_scatter_time(nbytes, n, link)


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

    The same answer as `link_for_ranks` on the listed ranks, without listing them (a billion
    GPUs cost a billion list entries): members per node follow the pattern of ``j · g mod
    stride`` over the nodes ``j``, which repeats every ``stride / gcd(stride, g)`` nodes, so
    that many full nodes and the last one are all there is to count.
    """
    g, last = profile.gpus_per_node, (size - 1) * stride
    if last < g:  # one node
        return profile.intra_node
    if stride >= g:  # one member per node
        k = 1
    else:
        last_node = last // g

        def first(j):  # the first member index on node j: ceil(j·g / stride)
            return -(-j * g // stride)
        period = stride // math.gcd(stride, g)
        k = min([first(j + 1) - first(j) for j in range(min(last_node, period))]
                + [size - first(last_node)])
    return Link(alpha=profile.inter_node.alpha, beta=min(profile.intra_node.beta, k * profile.inter_node.beta))


# ---------------------------------------------------------------- fitting alpha and beta


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> dict:
    """Least-squares fit of ``time = alpha + size / beta``; returns ``{"alpha": s, "beta": B/s}``.

    The residuals are relative (each row divided by its time): sizes span several decades, and
    a plain fit would let the largest message decide everything and leave alpha meaningless.
    Kept physical: a negative alpha (latency lost in noise) is clamped to 0 and beta refitted
    alone; a slope that is not positive (noise larger than the transfer times) falls back to
    the largest message alone for beta.
    """
    s, t = [float(x) for x in sizes], [float(x) for x in times]
    if len(s) != len(t) or len(s) < 2:
        raise ValueError(f"need at least two (size, time) pairs of equal length; got {len(s)} "
                         f"sizes and {len(t)} times.")
    if min(t) <= 0:
        raise ValueError("times must be positive.")
    if len(set(s)) < 2:
        raise ValueError(f"need at least two different sizes to fit a line; got {sorted(set(s))}.")
    # weighted rows (1/t, s/t) · (alpha, 1/beta) ≈ 1: the 2×2 normal equations, solved by hand
    a = [1 / x for x in t]
    b = [x / y for x, y in zip(s, t)]
    aa, ab, bb = sum(x * x for x in a), sum(x * y for x, y in zip(a, b)), sum(y * y for y in b)
    a1, b1 = sum(a), sum(b)
    det = aa * bb - ab * ab
    alpha, inv_beta = (a1 * bb - b1 * ab) / det, (aa * b1 - ab * a1) / det
    if alpha < 0:
        alpha, inv_beta = 0.0, b1 / bb
    if inv_beta <= 0:
        big = max(range(len(s)), key=s.__getitem__)
        inv_beta = max(t[big] - alpha, 0.5 * t[big]) / s[big]
    return {"alpha": alpha, "beta": 1 / inv_beta}


def ring_link(fit: dict, n: int) -> Link:
    """The link that a fit of all-reduce times on `n` ranks implies, read as a ring: the fitted
    alpha is ``2(n-1)`` ring steps, the fitted beta the buffer rate, which the ring moves
    ``bus_factor`` times over each link (the busbw asymptote)."""
    if n < 2:
        raise ValueError(f"a ring needs at least 2 ranks to have a link, got n={n}")
    return Link(alpha=fit["alpha"] / (2 * (n - 1)), beta=bus_factor("all_reduce", n) * fit["beta"])
