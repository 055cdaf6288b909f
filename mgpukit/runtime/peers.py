"""Which peer died: a rank that loses its connection names the ranks, and their nodes, that went silent.

Under `torchrun --nnodes 2`, a process killed on node 1 ends node 1's launcher with a clear
report (its rank, exit code, signal), but on node 0 the survivors only see gloo's "Connection
closed by peer [127.0.0.1]:PORT" — an address, not a rank — and node 0's launcher blames its own
rank 0. So every rank writes its state into the launcher's rendezvous store (the TCPStore that
torchrun's agent on the first node serves, reached through MASTER_ADDR / MASTER_PORT): "running"
once it starts, "failed" when it raises, "done" when it finishes. A rank whose error says a peer
went away waits a moment for the other survivors to report, then names the ranks still marked
"running" (or that never reported): a process that was killed cannot write "failed".

This is a diagnosis, not a guarantee: a rank that is merely slow to notice can be listed too,
and if the first node itself died the store is gone with it (the message then says that).
"""
from __future__ import annotations

import datetime
import os
import time

from mgpukit.runtime.failures import PEER_GONE
from mgpukit.runtime.nodes import NodeLayout


class PeerLostError(RuntimeError):
    """This rank's peer went away; the message names the ranks and nodes that went silent."""


class PeerWatch:
    def __init__(self, store, rank: int, world_size: int, nodes: NodeLayout, *, grace_s: float = 3.0):
        self.store, self.rank, self.world_size, self.nodes = store, rank, world_size, nodes
        self.grace_s = grace_s
        # a restarted job (torchrun --max-restarts) starts a new namespace: old states don't count
        # (the start count the process group met under, `launched.open_group_for_this_attempt`)
        start = os.environ.get("MGPUKIT_START") or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.prefix = f"mgpukit/peers/{start}/"

    @classmethod
    def from_env(cls, rank: int, world_size: int, nodes: NodeLayout) -> "PeerWatch | None":
        """A client of the launcher's store (MASTER_ADDR:MASTER_PORT); None where there is none."""
        # lazy: this module imports without torch (the parent, `mgpukit plan`)
        import torch.distributed as dist

        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not addr or not port or world_size < 2:
            return None
        try:
            store = dist.TCPStore(addr, int(port), is_master=False,
                                  timeout=datetime.timedelta(seconds=10))
        except Exception:  # no store to write to: the launcher's own report stands alone
            return None
        # Under `torchrun --max-restarts N` a survivor must fail at once: an agent whose workers
        # are still alive when the other node re-rendezvouses restarts them as a membership
        # change, not as a failure, and the two nodes' attempt numbers drift apart.
        restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
        return cls(store, rank, world_size, nodes, grace_s=0.0 if restarts else 3.0)

    def _set(self, state: str) -> None:
        try:
            self.store.set(f"{self.prefix}{self.rank}", state)
        except Exception:
            pass

    def started(self) -> None:
        self._set("running")

    def finished(self) -> None:
        self._set("done")

    def failed(self, error: BaseException) -> str | None:
        """Mark this rank failed; if `error` says a peer went away, the sentence naming the
        ranks that went silent (None for an error of this rank's own)."""
        self._set("failed")
        if not any(p in str(error) for p in PEER_GONE):
            return None
        time.sleep(self.grace_s)  # the other survivors notice and write "failed" meanwhile
        here = f"rank {self.rank} (node {self.nodes.node_of(self.rank)})"
        try:
            states = {r: self._get(r) for r in range(self.world_size) if r != self.rank}
        except Exception:
            return (f"{here} lost its connection to a peer, and the launcher's store on the first "
                    f"node is gone too: most likely a process on node 0 died. See that node's log.")
        silent = [r for r, s in states.items() if s in (None, "running")]
        if not silent:
            return None
        where = ", ".join(f"rank {r} on node {self.nodes.node_of(r)}{self._host(r)}" for r in silent)
        return (f"{here} lost its connection to a peer. {where} stopped without reporting an "
                f"error — most likely killed (out of memory, a signal, a lost node): see that "
                f"node's launcher log for its exit code.")

    def _get(self, rank: int) -> str | None:
        key = f"{self.prefix}{rank}"
        return self.store.get(key).decode() if self.store.check([key]) else None

    def _host(self, rank: int) -> str:
        hosts = self.nodes.hosts
        node = self.nodes.node_of(rank)
        return f" ({hosts[node]})" if node < len(hosts) and hosts[node] else ""
