"""The executor: runs any schedule table (``build_schedule``) on the launched ranks.

A schedule is a list of actions per rank (``mgpukit.costmodel.schedules``); this module is
what makes a table *happen*. For each action of its rank, in order:

====  ===================================================================================
F     receive the activation from stage ``s-1`` (stage 0: the micro-batch's token ids),
      run the stage, and send the output to stage ``s+1`` (the last stage computes the
      loss instead, scaled by ``1/m``, so the gradients add up to the full-batch gradient)
B     receive the gradient of the output from stage ``s+1`` (last stage: d loss = 1),
      ``torch.autograd.backward(output, grad)``, send the input's gradient to stage ``s-1``
I     the input half of B (``split_backward.backward_input``): sends the same gradient
W     the weight half, later; nothing is sent
====  ===================================================================================

Communication: the actions run in *rounds* (``p2p.plan_rounds``); a round first posts its
boundary tensors' sends and receives as one batch (one ``rec.exchange``), then runs its action,
which waits for the batch that carries its input. Why that never deadlocks, even under NCCL's
rendezvous rules: see ``p2p.py``.

Every action runs inside ``rec.compute(kind, microbatch=i, stage=s)`` with kinds ``fwd``,
``bwd``, ``bwd_input``, ``bwd_weight``: the timeline is the schedule as it really ran (a test
checks it equals the table), and in emulated mode the virtual clock charges each action its
own operations. Forward passes run under an activation meter (``PipelineMeter``): tensors
saved for backward are counted while they live, so the peak is the activation memory in
flight (GPipe: ``m`` micro-batches, 1F1B: at most ``p``).
"""
from __future__ import annotations

import contextlib

import torch

from mgpukit.costmodel.schedules import Action
from mgpukit.measure.memory import ActivationMeter
from mgpukit.strategies.pipeline.p2p import Message, Round, StageLinks, input_of, output_of
from mgpukit.strategies.pipeline.split_backward import (WeightGradCapture, backward_input,
                                                        backward_weight)

class PipelineMeter(ActivationMeter):
    """``ActivationMeter`` that keeps saved tensors *detached*.

    A tensor an op saves for backward may be its own output (softmax, exp, ...); kept with its
    ``grad_fn`` it makes a cycle, node -> saved tensor -> node, that only a backward which
    traverses the node and frees it breaks. Every B does; the zero-bubble W traverses only the
    weight-grad nodes, so without this the other saved tensors would never be released (and
    the meter would count them forever). The bytes counted are the same.
    """

    def _pack(self, tensor):
        return super()._pack(tensor.detach())


class PipelineExecutor:
    """Runs one rank's actions of a schedule, one optimizer step at a time.

    ``stages`` maps stage index -> module for the stages this rank holds; ``links`` moves
    boundary tensors; ``loss_fn(output, target)`` is the per-micro-batch mean loss.
    """

    def __init__(self, rec, stages: dict, *, num_stages: int, links: StageLinks, loss_fn,
                 meter: ActivationMeter, split_backward: bool = False):
        self.rec, self.stages, self.num_stages = rec, stages, num_stages
        self.links, self.loss_fn, self.meter = links, loss_fn, meter
        self.capture = WeightGradCapture(list(stages.values())) if split_backward else None
        self.live: dict[tuple[int, int], tuple] = {}  # (stage, mb) -> (input, output, captured)
        self.pending_w: dict[tuple[int, int], tuple] = {}  # (stage, mb) -> (captured, grads)
        self.boundary: dict[Message, torch.Tensor] = {}  # produced here, not yet sent or used
        self.incoming: dict[Message, tuple] = {}  # posted receives: message -> (handle, buffer)
        self.batches: list = []  # this step's batch handles (waited for at its end)
        self.in_flight_peak = 0  # most (stage, micro-batch) pairs between their F and B/I
        self.bytes_per_microbatch = None  # saved-for-backward bytes of one F on this rank

    # ------------------------------------------------------------------ one step
    def run_step(self, rounds: list[Round], inputs, targets) -> torch.Tensor | None:
        """Run this rank's ``rounds``; ``inputs[i]`` / ``targets[i]`` are micro-batch ``i``'s
        ids and labels (used by the first / last stage). Returns the sum of the scaled
        micro-batch losses on the rank holding the last stage (the full-batch mean loss),
        else None."""
        m = len(inputs)
        loss = None
        for rnd in rounds:
            a = rnd.action
            if rnd.sends or rnd.recvs:
                sends = {msg: self.boundary.pop(msg) for msg in rnd.sends}
                needed_now = a is not None and input_of(a, self.num_stages) in rnd.recvs
                handle, got = self.links.post(sends, rnd.recvs, waited_now=needed_now)
                self.incoming.update({msg: (handle, buf) for msg, buf in got.items()})
                self.batches.append(handle)
            if a is None:
                continue
            if a.kind == "F":
                out = self._forward(a, inputs, targets, m)
                if out is not None:
                    loss = out if loss is None else loss + out
            elif a.kind == "B":
                self._backward(a)
            elif a.kind == "I":
                self._backward_input(a)
            else:
                self._backward_weight(a)
        for handle in self.batches:  # sends no receive of ours waited for
            handle.wait()
        self.batches = []
        if self.live or self.pending_w or self.boundary or self.incoming:
            raise RuntimeError(f"schedule left work undone on rank {self.rec.rank}: forwards "
                               f"without backward {sorted(self.live)}, inputs-grads without "
                               f"weight-grads {sorted(self.pending_w)}, boundary tensors "
                               f"never used {sorted(self.boundary) + sorted(self.incoming)}.")
        return loss

    # ------------------------------------------------------------------ actions
    def _input(self, a: Action):
        """The boundary tensor ``a`` needs: received (its batch waited for now), or left here
        by a stage on this rank."""
        msg = input_of(a, self.num_stages)
        if msg is None:
            return None
        if msg in self.incoming:
            handle, buf = self.incoming.pop(msg)
            handle.wait()
            return buf
        return self.boundary.pop(msg)

    def _output(self, a: Action, tensor) -> None:
        """Keep what ``a`` produced until the next round sends it (or a stage here uses it)."""
        msg = output_of(a, self.num_stages)
        if msg is not None:
            self.boundary[msg] = tensor

    def _forward(self, a: Action, inputs, targets, m: int):
        s, i = a.stage, a.microbatch
        stage = self.stages[s]
        x = inputs[i] if s == 0 else self._input(a).requires_grad_()
        captured: list = []
        before = self.meter.live
        with self.rec.compute("fwd", microbatch=i, stage=s), self.meter.track(), \
                self._capturing(captured):
            out = stage(x)
            if s == self.num_stages - 1:
                out = self.loss_fn(out, targets[i]) / m  # mean over micro-batches
        if self.bytes_per_microbatch is None:
            self.bytes_per_microbatch = self.meter.live - before
        self.live[(s, i)] = (x, out, captured)
        self.in_flight_peak = max(self.in_flight_peak, len(self.live))
        if s == self.num_stages - 1:
            return out.detach()
        self._output(a, out.detach())
        return None

    def _backward(self, a: Action):
        s, i = a.stage, a.microbatch
        x, out, _ = self.live.pop((s, i))
        grad = self._input(a)  # None on the last stage: the output is the loss, d loss = 1
        with self.rec.compute("bwd", microbatch=i, stage=s):
            torch.autograd.backward(out, grad)
        if s > 0:
            self._output(a, x.grad)

    def _backward_input(self, a: Action):
        s, i = a.stage, a.microbatch
        x, out, captured = self.live.pop((s, i))
        grad = self._input(a)
        with self.rec.compute("bwd_input", microbatch=i, stage=s):
            grad_x, grads_out = backward_input(out, grad, x, captured)
        self.pending_w[(s, i)] = (captured, grads_out)
        if s > 0:
            self._output(a, grad_x)

    def _backward_weight(self, a: Action):
        s, i = a.stage, a.microbatch
        captured, grads_out = self.pending_w.pop((s, i))
        with self.rec.compute("bwd_weight", microbatch=i, stage=s):
            backward_weight(captured, grads_out)

    def _capturing(self, into: list):
        return self.capture.capture(into) if self.capture is not None else contextlib.nullcontext()
