"""Strict point-to-point: NCCL's rendezvous rules enforced on gloo, so a CPU test sees a GPU hang.

gloo buffers a send: `isend` completes whether or not the peer has posted its receive, and the
messages between two ranks never wait for each other. NCCL does neither:

1. a send completes only once the peer has posted the matching receive (a rendezvous);
2. unbatched sends and receives between two ranks run in order on that pair's stream: an op
   starts only when the previous one on the pair has finished, so "isend to B, then irecv from
   B" on both ranks of a pair waits forever;
3. the pair's communicator is created by the first unbatched op between the two ranks, and
   creating it is itself a rendezvous: a ring in which every rank first sends to its right
   neighbour waits forever before a byte moves;
4. a batch (`Recorder.exchange`, `dist.batch_isend_irecv`) is one grouped launch on the
   group's communicator, and the launches on one communicator run in order on its stream: a
   batch starts only once the group's previous batch has finished.

Rules 2 and 3 concern unbatched ops only; a batch obeys rule 1 as a whole, and rule 4.

How: a receive, when posted, writes the c10d-store key `ready/<group>/<src>/<dst>/<seq>`
(messages between two ranks match in posting order, so both sides count the same `seq`); a
send completes only after that key exists. Rule 2 waits for the pair's previous op before the
next is posted, rule 4 for the group's previous batch; rule 3 is a one-time `init` handshake
per pair. The host waits where a GPU's
*stream* would, which is stricter (a GPU's host goes on to other streams): a strict pass is a
pass, a strict hang is a lead to read, not yet a proof.

Off by default: `launch(..., options={"strict_p2p": True})` (or `MGPUKIT_STRICT_P2P=1` when the
launch starts); the recorder reads `ctx.options["strict_p2p"]`.
"""
from __future__ import annotations

from collections import Counter

import torch.distributed as dist

_PREFIX = "mgpukit/strict"


class StrictP2P:
    """One rank's bookkeeping of the three rules (see the module docstring)."""

    def __init__(self, rank: int):
        self.rank = rank
        self._store = None
        self._seq: Counter = Counter()  # (group, src, dst) -> messages posted so far on this side
        self._inited: set = set()  # pairs whose "communicator" exists
        self._stream: dict[tuple, list] = {}  # pair -> its unbatched handles, in posting order
        self._last_batch: dict[str, _AfterReady] = {}  # group -> its latest batch's work

    def store(self):
        if self._store is None:
            self._store = dist.distributed_c10d._get_default_store()
        return self._store

    @staticmethod
    def _group(group) -> str:
        return (group or dist.group.WORLD).group_name

    def _ready_key(self, group, src: int, dst: int) -> str:
        c = (self._group(group), src, dst)
        seq = self._seq[c]
        self._seq[c] += 1
        return f"{_PREFIX}/ready/{c[0]}/{src}/{dst}/{seq}"

    def before_unbatched(self, group, peer: int) -> None:
        """Rules 3 and 2: the pair's communicator exists, and its previous op has finished."""
        pair = (self._group(group), min(self.rank, peer), max(self.rank, peer))
        if pair not in self._inited:
            self._inited.add(pair)
            name = f"{_PREFIX}/init/{pair[0]}/{pair[1]}-{pair[2]}"
            self.store().set(f"{name}/{self.rank}", b"1")
            self.store().wait([f"{name}/{peer}"])
        for handle in self._stream.pop(pair, []):
            handle.wait()

    def posted(self, group, peer: int, handle) -> None:
        pair = (self._group(group), min(self.rank, peer), max(self.rank, peer))
        self._stream.setdefault(pair, []).append(handle)

    def recv_posted(self, group, src: int) -> None:
        self.store().set(self._ready_key(group, src, self.rank), b"1")

    def send(self, work, group, dst: int):
        """Rule 1: the send's work completes only once `dst` has posted the receive."""
        return _AfterReady(self.store(), [self._ready_key(group, self.rank, dst)], work)

    def batch(self, group, sends, recvs):
        """A batch: the group's previous batch finishes first (rule 4), its receives are
        posted now; returns a wrapper for its work (rule 1)."""
        previous = self._last_batch.pop(self._group(group), None)
        if previous is not None:
            previous.wait()
        for _, src in recvs:
            self.recv_posted(group, src)
        keys = [self._ready_key(group, self.rank, dst) for _, dst in sends]
        return lambda work: _AfterReady(self.store(), keys, work)

    def batch_posted(self, group, work) -> None:
        self._last_batch[self._group(group)] = work


class _AfterReady:
    """A work that completes once its receivers are ready; waiting twice waits once (rule 4
    waits for a batch before its owner does)."""

    def __init__(self, store, keys: list[str], work):
        self.store, self.keys, self.work, self.done = store, keys, work, False

    def wait(self):
        if self.done:
            return
        if self.keys:
            self.store.wait(self.keys)
        self.work.wait()
        self.done = True
