"""All-reduce written from point-to-point messages: naive, ring, recursive halving-doubling.

An all-reduce leaves on every rank the elementwise sum of every rank's tensor. The backend
(NCCL, gloo) has its own; here the same result is built from `send`/`recv` alone, three ways,
so the cost of each can be read off the code. With `n` ranks, a buffer of `B` bytes, a link of
latency `α` (seconds per message) and bandwidth `β` (bytes/s), the alpha-beta model says:

=====================  ====================================  =============================
algorithm              time                                  bytes each rank sends
=====================  ====================================  =============================
naive (reduce+bcast)   ``2(n-1)·α + 2(n-1)·B/β`` at rank 0    ``2(n-1)·B`` through rank 0,
                                                             ``B`` from every other rank
ring                   ``2(n-1)·α + 2(n-1)/n · B/β``          ``2(n-1)/n · B``
halving-doubling       ``2·log2(n)·α + 2(n-1)/n · B/β``        ``2(n-1)/n · B``
=====================  ====================================  =============================

The ring (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
workstations"; the Baidu ring all-reduce of 2017) is a reduce-scatter then an all-gather, each
``n-1`` steps of ``B/n`` bytes: every link is busy at every step and the bytes per rank no
longer grow with ``n`` — bandwidth optimal, but ``2(n-1)`` latencies. Recursive halving then
doubling (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
operations in MPICH") moves the same bytes in ``2·log2(n)`` steps — it wins for small messages,
where latency dominates, and needs a power-of-two ``n``.

Every function takes the rank's `Recorder` first, so each message is counted (bytes sent and
received) and timed (wall clock, or the virtual clock in emulated mode), and reduces in place
with SUM, like `dist.all_reduce(tensor)`. Ranks are global; `group=None` is the whole world,
a process group restricts the collective to its members. The tensor must be contiguous.
"""
from __future__ import annotations

import math

import torch

from mgpukit.costmodel.comm import allreduce_time, bus_factor
from mgpukit.measure.recorder import group_ranks


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise ValueError("the hand-written collectives work on a contiguous tensor; "
                         "pass tensor.contiguous() and copy the result back.")
    return tensor.view(-1)


def _me(rec, group) -> tuple[list[int], int]:
    """The group's global ranks and this rank's position in it."""
    ranks = group_ranks(group)
    if rec.rank not in ranks:
        raise ValueError(f"rank {rec.rank} is not a member of the group {ranks}.")
    return ranks, ranks.index(rec.rank)


def chunks(tensor: torch.Tensor, n: int) -> list[torch.Tensor]:
    """The `n` pieces the ring moves: contiguous views of the flattened tensor, sizes
    differing by at most one element (`torch.tensor_split`), so any size works."""
    return list(torch.tensor_split(_flat(tensor), n))


def _exchange(rec, send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, group) -> None:
    """Send `send` to `dst` while receiving `recv` from `src`, posted together as one batch
    (`Recorder.exchange`): every rank of a ring sends and receives at once, which gloo allows
    with a separate isend and irecv but NCCL only as a batch (otherwise: a deadlock)."""
    rec.exchange(sends=[(send, dst)], recvs=[(recv, src)], group=group, waited_now=True).wait()


# ---------------------------------------------------------------- naive: through rank 0


def naive_all_reduce(rec, tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Reduce to the group's first rank, then send the sum back to everyone.

    Cost: the root receives ``(n-1)·B`` and sends ``(n-1)·B``: ``2(n-1)·B`` bytes through one
    rank, ``2(n-1)·(α + B/β)`` seconds — it grows with ``n`` while every other link idles.
    Every other rank sends ``B`` and receives ``B``.

    The emulator charges less, ``n·(α + B/β)``: it serialises the root's outgoing messages on
    its send stream but lets the ``n-1`` incoming ones arrive side by side (it models no
    contention on a receiver's link), so emulated naive looks better than it is for small
    messages. The bytes it counts are exact.
    """
    ranks, me = _me(rec, group)
    flat = _flat(tensor)
    n = len(ranks)
    if n == 1:
        return tensor
    root = ranks[0]
    if me == 0:
        inbox = [torch.empty_like(flat) for _ in ranks[1:]]
        for h in [rec.irecv(buf, src, group=group) for buf, src in zip(inbox, ranks[1:])]:
            h.wait()
        for buf in inbox:  # in rank order: the same sum on every run
            flat.add_(buf)
        for h in [rec.isend(flat, dst, group=group) for dst in ranks[1:]]:
            h.wait()
    else:
        rec.send(flat, root, group=group)
        rec.recv(flat, root, group=group)
    return tensor


# ---------------------------------------------------------------- ring


def ring_reduce_scatter(rec, tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Ring reduce-scatter in place: afterwards chunk `i` (see `chunks`) of group rank `i`
    holds the sum over the group; the other chunks hold partial sums. Returns that chunk.

    ``n-1`` steps; at step `s` rank `r` sends chunk ``(r-s-1) mod n`` to its right neighbour and
    adds the chunk ``(r-s-2) mod n`` arriving from its left, so the last chunk it completes is
    its own. Cost: ``(n-1)·α + (n-1)/n · B/β``, ``(n-1)/n · B`` bytes sent per rank.
    """
    ranks, me = _me(rec, group)
    n = len(ranks)
    parts = chunks(tensor, n)
    if n == 1:
        return parts[0]
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    inbox = torch.empty_like(parts[0])  # the largest chunk: tensor_split puts the extras first
    for s in range(n - 1):
        send, recv = parts[(me - s - 1) % n], parts[(me - s - 2) % n]
        buf = inbox[: recv.numel()]
        _exchange(rec, send, right, buf, left, group)
        recv.add_(buf)
    return parts[me]


def ring_all_gather(rec, tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Ring all-gather in place: group rank `i` contributes chunk `i` (see `chunks`) of
    `tensor`; afterwards every rank holds every chunk.

    ``n-1`` steps; at step `s` rank `r` forwards chunk ``(r-s) mod n`` to the right and receives
    chunk ``(r-s-1) mod n`` from the left. Cost: ``(n-1)·α + (n-1)/n · B/β``.
    """
    ranks, me = _me(rec, group)
    n = len(ranks)
    parts = chunks(tensor, n)
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for s in range(n - 1):
        _exchange(rec, parts[(me - s) % n], right, parts[(me - s - 1) % n], left, group)
    return tensor


def ring_all_reduce(rec, tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Ring all-reduce (SUM, in place): `ring_reduce_scatter` then `ring_all_gather`.

    ``2(n-1)`` steps of ``B/n`` bytes: ``2(n-1)·α + 2(n-1)/n · B/β`` seconds and
    ``2(n-1)/n · B`` bytes sent by each rank — about ``2B`` whatever ``n``. This is the
    schedule nccl-tests' "bus bandwidth" is normalised to.
    """
    ring_reduce_scatter(rec, tensor, group)
    return ring_all_gather(rec, tensor, group)


# ---------------------------------------------------------------- recursive halving-doubling


def halving_doubling_all_reduce(rec, tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Rabenseifner's all-reduce (SUM, in place): recursive-halving reduce-scatter, then
    recursive-doubling all-gather. Needs a power-of-two group size.

    Halving: at level ``k = n/2, n/4, … 1`` rank `r` pairs with ``r XOR k``; the pair split their
    current segment in two, each sends the half the other keeps and adds the half it receives.
    After ``log2(n)`` levels each rank owns ``1/n`` of the sum; doubling retraces the levels,
    swapping owned segments until everyone has everything. Bytes sent per rank:
    ``B/2 + B/4 + … = (n-1)/n · B`` each way, ``2(n-1)/n · B`` in all — the same as the ring —
    in ``2·log2(n)`` messages: ``2·log2(n)·α + 2(n-1)/n · B/β``.

    The butterfly is the log-depth ("tree") family; NCCL's tree algorithm is a different
    member (a double binary tree, Sanders et al. 2009) with the same ``log n`` latency.
    """
    ranks, me = _me(rec, group)
    n = len(ranks)
    if n & (n - 1):
        raise ValueError(
            f"recursive halving-doubling pairs ranks r and r XOR 2^k, so it needs a power-of-two "
            f"group; this one has {n} ranks. Use ring_all_reduce (any n), or 2, 4, 8 … workers.")
    flat = _flat(tensor)
    if n == 1:
        return tensor
    lo, hi = 0, flat.numel()
    levels = []  # (partner, kept segment, given segment), for the doubling to retrace
    mask = n // 2
    while mask:
        partner = ranks[me ^ mask]
        mid = (lo + hi) // 2
        low_half = not me & mask  # the lower rank of the pair keeps the lower half
        keep, give = ((lo, mid), (mid, hi)) if low_half else ((mid, hi), (lo, mid))
        inbox = torch.empty(keep[1] - keep[0], dtype=flat.dtype, device=flat.device)
        _exchange(rec, flat[give[0]:give[1]], partner, inbox, partner, group)
        flat[keep[0]:keep[1]].add_(inbox)
        levels.append((partner, keep, give))
        lo, hi = keep
        mask //= 2
    for partner, keep, give in reversed(levels):
        _exchange(rec, flat[keep[0]:keep[1]], partner, flat[give[0]:give[1]], partner, group)
    return tensor


tree_all_reduce = halving_doubling_all_reduce  # the name the benchmark and notebook use ("tree")


def backend_all_reduce(rec, tensor: torch.Tensor, group=None) -> torch.Tensor:
    """The backend's own all-reduce (gloo / NCCL) through the recorder, for comparison."""
    rec.all_reduce(tensor, group=group)
    return tensor


ALL_REDUCE = {
    "backend": backend_all_reduce,
    "ring": ring_all_reduce,
    "naive": naive_all_reduce,
    "tree": halving_doubling_all_reduce,
}


def all_reduce_fn(impl: str):
    """The all-reduce called `impl` ("backend", "ring", "naive" or "tree")."""
    if impl not in ALL_REDUCE:
        raise ValueError(f"unknown all-reduce {impl!r}; choose one of {', '.join(ALL_REDUCE)}.")
    return ALL_REDUCE[impl]


def bytes_sent(impl: str, nbytes: float, n: int, rank: int = 0) -> float:
    """Bytes `rank` sends in one all-reduce of `nbytes` (evenly divisible sizes), per the table above."""
    if n == 1:
        return 0.0
    if impl == "naive":
        return (n - 1) * nbytes if rank == 0 else nbytes
    if impl == "tree" and n & (n - 1):
        raise ValueError(f"tree (halving-doubling) needs a power-of-two n, got {n}.")
    return bus_factor("all_reduce", n) * nbytes


def predicted_time(impl: str, nbytes: float, n: int, link) -> float:
    """Alpha-beta time of one all-reduce of `nbytes` on `n` ranks over `link` (.alpha, .beta).

    `backend` is charged as a ring, which is what the emulator assumes for `rec.all_reduce`.
    """
    if n == 1:
        return 0.0
    a, b = link.alpha, link.beta
    if impl in ("ring", "backend"):
        return allreduce_time(nbytes, n, link)
    if impl == "naive":
        return 2 * (n - 1) * (a + nbytes / b)
    if impl == "tree":
        if n & (n - 1):
            raise ValueError(f"tree (halving-doubling) needs a power-of-two n, got {n}.")
        return 2 * math.log2(n) * a + bus_factor("all_reduce", n) * nbytes / b
    raise ValueError(f"unknown all-reduce {impl!r}; choose one of {', '.join(ALL_REDUCE)}.")
