"""Point-to-point between pipeline stages: activations go forward, their gradients come back.

What NCCL demands. A send completes only once its peer has posted the matching receive (a
rendezvous), and the messages two ranks exchange on one communicator run in order. So "send
as soon as the output exists, receive when the input is needed", which gloo forgives because
it buffers sends, can leave two ranks each waiting in a send for the other's receive
(interleaved 1F1B at ``p = 2`` does: ``measure/p2p_strict.py`` shows it on CPU). What
``torch.distributed.pipelining`` and Megatron-LM do instead: each step's sends and receives
are posted together, as one batch (``batch_isend_irecv``), and the batch is waited for before
the step's compute — a forward's output goes out in the same batch as the next backward's
incoming gradient.

How we choose the batches, for any table (``plan_rounds``). Every rank replays the whole
schedule in *rounds* with unit-cost actions: in round ``t`` each rank runs its next action if
the inputs it needs were produced in an earlier round (the lockstep form of
``costmodel.simulate``). A message belongs to the round after the one that produced it: at the
start of that round its sender posts the send and its receiver the receive, each rank all of
its messages of the round in one batch (``Recorder.exchange``: one recorder call, one clock
read). The receiver waits for the batch just before the action that needs the message (often
at once); a batch nobody needs data from is waited for at the end of the step. Every message's
two ends sit in batches of the same round, every rank posts its rounds in order, and a rank
only ever waits for a batch of a round it has already posted — so by induction on ``t`` every
batch completes: no deadlock under NCCL's rules (a send completes once its receive is posted;
the batches of one communicator run in order), whatever the schedule; the tests run all of
them under strict mode. The rounds are bookkeeping only: a rank waits only for data it needs
now, and a message leaves as soon as its producer is done — the dataflow timing that
``simulate`` and the virtual clock assume.

The price, which NCCL makes real on GPUs too: a batch is one work, so waiting for the receive
in it also waits for the sends posted with it (and, under the rendezvous, for their receivers
to have posted).

One process group is enough. Messages between two ranks match in posting order; both ends
post a round's messages in the same order (sorted by ``Message``) and the rounds in the same
order, so each receive meets its message even when activations and gradients travel between
the same two ranks (``p = 2``, interleaved chunks). Every message goes through the recorder,
so its bytes are counted and, in emulated mode, its time travels with it (the receiver's clock
becomes ``max(own, sent_at + alpha + bytes/beta)``). A stage whose neighbour lives on the same
rank (one rank, several chunks) gets the tensor handed over without a message.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from mgpukit.costmodel.actions import Action, Table, num_stages
from mgpukit.costmodel.simulate import DeadlockError


class Message(NamedTuple):
    """One boundary tensor: ``kind`` "act" (forward) or "grad" (backward), stage to stage."""

    kind: str
    src_stage: int
    dst_stage: int
    microbatch: int


class Round(NamedTuple):
    """What one rank does in one round: post ``sends`` and ``recvs`` as one batch, then run
    ``action`` (None: this rank only passes messages on in this round)."""

    index: int
    action: Action | None
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]


def input_of(a: Action, stages: int) -> Message | None:
    """The boundary tensor action ``a`` needs from another stage (None: it needs none)."""
    s, i = a.stage, a.microbatch
    if a.kind == "F" and s > 0:
        return Message("act", s - 1, s, i)
    if a.kind in "BI" and s < stages - 1:
        return Message("grad", s + 1, s, i)
    return None


def output_of(a: Action, stages: int) -> Message | None:
    """The boundary tensor action ``a`` produces for another stage (None: it produces none)."""
    s, i = a.stage, a.microbatch
    if a.kind == "F" and s < stages - 1:
        return Message("act", s, s + 1, i)
    if a.kind in "BI" and s > 0:
        return Message("grad", s, s - 1, i)
    return None


def plan_rounds(table: Table) -> list[list[Round]]:
    """Per pipeline rank, its rounds (module docstring): the batches and actions, in order.

    Stage ``s`` lives on rank ``s % p``. Rounds in which a rank neither computes nor passes a
    message are left out. Raises ``DeadlockError`` for a table whose order can never finish.
    """
    p, stages = len(table), num_stages(table)
    pos, run_at = [0] * p, {}  # action -> the round it runs in
    produced = {None: -1}  # message -> the round it was produced in (no input: always ready)
    t = 0
    while any(pos[r] < len(table[r]) for r in range(p)):
        nexts = [table[r][pos[r]] for r in range(p) if pos[r] < len(table[r])]
        ready = [a for a in nexts if produced.get(input_of(a, stages), t) < t]
        if not ready:
            stuck = {r: str(table[r][pos[r]]) for r in range(p) if pos[r] < len(table[r])}
            raise DeadlockError(f"no rank can run its next action: {stuck}")
        for a in ready:
            pos[a.stage % p] += 1
            run_at[a] = t
            out = output_of(a, stages)
            if out is not None:
                produced[out] = t
        t += 1
    rounds = [{} for _ in range(p)]  # rank -> round -> [action, sends, recvs]

    def at(r, k):
        return rounds[r].setdefault(k, [None, [], []])

    for a, k in run_at.items():
        at(a.stage % p, k)[0] = a
        msg = output_of(a, stages)
        if msg is not None and msg.src_stage % p != msg.dst_stage % p:
            at(msg.src_stage % p, k + 1)[1].append(msg)  # posted the round after it exists
            at(msg.dst_stage % p, k + 1)[2].append(msg)
    return [[Round(k, a, tuple(sorted(sends)), tuple(sorted(recvs)))
             for k, (a, sends, recvs) in sorted(rounds[r].items())] for r in range(p)]


class StageLinks:
    """Move the boundary tensors of one round between this rank and its pipeline neighbours."""

    def __init__(self, rec, ctx, *, stage_rank, shape: tuple[int, ...], dtype=torch.float32,
                 device=None):
        self.rec = rec
        self.stage_rank = stage_rank  # stage index -> global rank
        self.shape, self.dtype, self.device = shape, dtype, device
        self.group = ctx.group("pp")

    def post(self, sends: dict[Message, torch.Tensor], recvs, *, waited_now: bool):
        """Post ``sends`` and the receives of ``recvs`` as one batch; returns its handle and
        the buffers the receives fill (valid once the handle has been waited for). Both ends
        list a round's messages in the same (sorted) order. ``waited_now``: the caller waits
        at once, so the wait stamps the end (no watcher thread; ``Recorder.exchange``)."""
        got = {msg: torch.empty(self.shape, dtype=self.dtype, device=self.device) for msg in recvs}
        handle = self.rec.exchange(
            sends=[(t.contiguous(), self.stage_rank(msg.dst_stage)) for msg, t in sends.items()],
            recvs=[(buf, self.stage_rank(msg.src_stage)) for msg, buf in got.items()],
            group=self.group, waited_now=waited_now)
        return handle, got
