"""PyTorch's order for our pipeline schedules, as an `Action` table: the check that
`mgpukit.costmodel.schedules.build_schedule` runs what ``torch.distributed.pipelining`` runs.

The cost model holds the schedules as pure data with no torch inside; this module is the one
place that asks torch for its order and translates it (tests compare the two, action by action).
Uses private torch APIs: a torch upgrade may break this module, never the kit.
"""
from __future__ import annotations

from types import SimpleNamespace

from torch.distributed.pipelining import schedules as tps

from mgpukit.costmodel.actions import KINDS, Action, Table


def torch_order(name: str, p: int, m: int, v: int = 1) -> Table:
    """PyTorch's order for the same schedule, as our ``Action`` table (compute actions only).

    Built without a process group from stand-in stage objects:

    - ``gpipe`` / ``1f1b`` (``ScheduleGPipe``, ``Schedule1F1B``, single-stage): we *run*
      ``_step_microbatches`` once per rank with a stand-in stage that records each
      ``forward_one_chunk`` / ``backward_one_chunk`` call and returns no p2p ops. (Their
      ``pipeline_order`` is only a picture, and in torch 2.13 ``Schedule1F1B``'s mislabels the
      last rank's micro-batches 1..m.)
    - ``interleaved`` (``ScheduleInterleaved1F1B``) and ``zb-h1``
      (``ScheduleInterleavedZeroBubble`` with one stage per rank): the ``pipeline_order`` IR
      that the runtime lowers and executes, without ``None`` (idle) slots and non-compute
      actions (``REDUCE_GRAD``...).

    Uses private torch APIs: a torch upgrade may break this function, never the kit.
    """
    if name in ("gpipe", "1f1b"):
        cls = tps.ScheduleGPipe if name == "gpipe" else tps.Schedule1F1B
        return [_record_single_stage(cls, p, m, r) for r in range(p)]
    if name in ("interleaved", "zb-h1"):
        if name == "zb-h1" and v != 1:
            raise ValueError("zb-h1 has one stage per rank; pass v=1.")
        cls = (tps.ScheduleInterleaved1F1B if name == "interleaved"
               else tps.ScheduleInterleavedZeroBubble)
        stages = [SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0, stage_index=c * p,
                                  submod=None, is_first=c == 0, is_last=c == v - 1)
                  for c in range(v)]
        order = cls(stages, m).pipeline_order  # every rank's order is computed on any rank
        return [[Action(a.computation_type.value, a.microbatch_index, a.stage_index)
                 for a in order[r] if a is not None and a.computation_type.value in KINDS]
                for r in range(p)]
    raise ValueError(f"PyTorch has no {name!r} schedule; compare one of gpipe, 1f1b, "
                     f"interleaved, zb-h1.")


def _record_single_stage(cls, p: int, m: int, rank: int) -> list[Action]:
    ops: list[Action] = []

    class _Recorder:  # just enough of _PipelineStageBase for _step_microbatches
        num_stages, stage_index, is_first, is_last = p, rank, rank == 0, False
        device, output_chunks = "cpu", []

        def forward_one_chunk(self, i, *args, **kwargs):
            ops.append(Action("F", i, rank))

        def backward_one_chunk(self, i, *args, **kwargs):
            ops.append(Action("B", i, rank))

        def _no_ops(self, *args, **kwargs):
            return []

        get_fwd_recv_ops = get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = _no_ops
        _get_init_p2p_neighbors_ops = _no_ops
        _prepare_forward_infra = _prepare_backward_infra = perform_reduce_grad = _no_ops

    sched = cls(_Recorder(), m, loss_fn=lambda out, target: out)  # loss_fn: a backward runs
    sched._step_microbatches()
    return ops
