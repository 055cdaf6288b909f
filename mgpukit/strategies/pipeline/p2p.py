"""Point-to-point between pipeline stages: activations go forward, their gradients come back.

Every message goes through the recorder (`rec.isend` / `rec.irecv`, global ranks), so its
bytes are counted and, in emulated mode, its time travels with it (the receiver's clock
becomes ``max(own, sent_at + alpha + bytes/beta)``).

Why two process groups. gloo (and NCCL) match point-to-point messages between two ranks
*in posting order*: the k-th receive rank B posts from rank A gets the k-th message A sent
it. With ``p = 2`` or with interleaved chunks, the same pair of ranks exchanges activations
*and* gradients, and the order in which A produces the two kinds need not be the order in
which B asks for them. Activations travel on one group and gradients on another; within one
kind both sides follow the same sequence (the schedule runs each kind of action in the same
micro-batch order on every rank), so each receive meets its message and nothing deadlocks:

- sends are asynchronous and only waited for at the end of the step (``rec.step`` does it);
- a receive is posted when its action is next and waited for at once — it can only wait for
  a message that the sender's own, deadlock-free order (``simulate`` checks it) produces.

A stage whose neighbour lives on the same rank (one rank, several chunks) hands the tensor
over through a local mailbox instead.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def second_pp_group(ctx):
    """A second process group over this rank's pipeline, for gradients (see the module doc).

    `new_group` is a collective call: every rank creates every pipeline's group, in the same
    order, and keeps its own."""
    if ctx.mesh is None or ctx.size("pp") == 1:
        return None
    dims, mine = ctx.dims, None
    for dp in range(dims.dp):
        for tp in range(dims.tp):
            ranks = [dims.rank_of(pp=s, dp=dp, tp=tp) for s in range(dims.pp)]
            group = dist.new_group(ranks)
            if ctx.rank in ranks:
                mine = group
    return mine


class StageLinks:
    """Send and receive the boundary tensors of stage ``s`` to/from stages ``s ± 1``."""

    def __init__(self, rec, ctx, *, stage_rank, shape: tuple[int, ...], dtype=torch.float32,
                 device=None):
        self.rec = rec
        self.stage_rank = stage_rank  # stage index -> global rank
        self.shape, self.dtype, self.device = shape, dtype, device
        self.rank = rec.rank
        self.groups = {"act": ctx.group("pp"), "grad": second_pp_group(ctx)}
        self._mailbox: dict[tuple, torch.Tensor] = {}

    def send(self, kind: str, tensor: torch.Tensor, *, to_stage: int, microbatch: int) -> None:
        """Asynchronous send of an activation (``kind="act"``) or a gradient (``"grad"``)."""
        dst = self.stage_rank(to_stage)
        if dst == self.rank:
            self._mailbox[(kind, to_stage, microbatch)] = tensor
            return
        self.rec.isend(tensor.contiguous(), dst, group=self.groups[kind])

    def recv(self, kind: str, *, from_stage: int, to_stage: int, microbatch: int) -> torch.Tensor:
        """Blocking receive of what stage ``from_stage`` sent to stage ``to_stage``."""
        src = self.stage_rank(from_stage)
        if src == self.rank:
            return self._mailbox.pop((kind, to_stage, microbatch))
        buf = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        self.rec.recv(buf, src, group=self.groups[kind])
        return buf
