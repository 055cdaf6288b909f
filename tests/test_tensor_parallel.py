"""Tensor and sequence parallelism: parity with one process, the collectives each block issues,
the bytes against the cost model's table, activation memory with sequence parallelism."""
import dataclasses

import pytest
import torch

import mgpukit
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.tensor_parallel import tp_bytes_per_step, tp_collectives
from mgpukit.experiment import run
from mgpukit.prepare import prepare
from mgpukit.lessons.tensor_parallel import layernorm_saved_bytes
from mgpukit.models import GPT, gpt_tiny
from mgpukit.runtime.context import worker_context
from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.tensor_parallel.apply import split_block
from mgpukit.strategies.tensor_parallel.comm import TPGroup


@pytest.mark.parametrize("strategy, workers, layout", [
    ("tp", 2, {}), ("tp", 4, {}), ("tp-sp", 2, {}), ("tp-sp", 4, {}),
    ("tp-native", 2, {}), ("tp-native", 4, {"sp": True}),
    ("tp", 4, {"dp": 2}),                      # dp × tp through the core
    ("dp-bucketed", 4, {"tp": 2}),             # a dp strategy's sync over Megatron-style layers
])
def test_tensor_parallel_matches_one_process(strategy, workers, layout):
    rec = run(strategy, workers=workers, steps=3, layout=layout)
    p = rec["parity"]
    # losses, every gradient's norm and every weight (gathered to full shape) at fp32 defaults
    assert p["ok"] and p["weights_checked"], p
    assert rec["layout"]["tp"] == workers // rec["layout"]["dp"]


class _Counting:
    """A recorder stand-in for one rank: collectives of a group of one, counted by name."""

    def __init__(self):
        self.calls = []

    def all_reduce(self, t, op=None, group=None):
        self.calls.append("all_reduce")

    def all_gather(self, out, inp, group=None):
        self.calls.append("all_gather")
        out.copy_(inp)

    def reduce_scatter(self, out, inp, group=None):
        self.calls.append("reduce_scatter")
        out.copy_(inp)


def _tp_ctx(tp: int, rank: int = 0):
    """Rank `rank`'s context in a tp-only mesh of `tp` ranks, without process groups."""
    return worker_context(rank=rank, world_size=tp, mode="cpu", device=torch.device("cpu"), t0=0.0,
                          threads=1, dims=ParallelDims(tp=tp), mesh=False)


def test_the_tp_group_asks_the_mesh_for_its_degree_and_rank():
    """The tp degree lives in the layout and the mesh only: a `TPGroup` keeps the recorder and
    the context, and reads t and its index from the context's mesh on every rank."""
    assert [f.name for f in dataclasses.fields(TPGroup)] == ["rec", "ctx"]
    for rank in range(4):
        ctx = _tp_ctx(4, rank)
        tp = TPGroup(rec=None, ctx=ctx)
        assert (tp.size, tp.rank, tp.group) == (ctx.size("tp"), ctx.coords["tp"], ctx.group("tp")) == (4, rank, None)


@pytest.mark.parametrize("sp, forward, backward", [
    (False, ["all_reduce"] * 2, ["all_reduce"] * 2),  # g after attention and MLP; f before them
    (True, ["all_gather", "reduce_scatter"] * 2, ["reduce_scatter", "all_gather"] * 2),
])
def test_each_block_issues_the_designed_collectives(sp, forward, backward):
    rec = _Counting()
    tp = TPGroup(rec=rec, ctx=_tp_ctx(1))
    block = split_block(GPT(gpt_tiny()).blocks[0], tp, sp=sp)
    x = torch.randn(2, 8, 64, requires_grad=True)
    y = block(x)
    assert sorted(rec.calls) == sorted(forward)
    rec.calls.clear()
    y.sum().backward()
    assert sorted(rec.calls) == sorted(backward)


@pytest.mark.parametrize("strategy", ["tp", "tp-sp"])
def test_bytes_and_counts_per_step_match_the_cost_model(strategy):
    rec = run(strategy, workers=2, steps=2, parity=False)
    layout = prepare(strategy, workers=2, steps=2).cfg.layout
    shape = ModelShape.from_gpt_config(gpt_tiny())
    want_counts = {k: 2 * sum(c for c, _ in v) for k, v in tp_collectives(shape, layout).items()}
    for rank in ("0", "1"):
        comm = rec["comm"][rank]
        assert comm["collectives"] == want_counts
        want = 2 * tp_bytes_per_step(shape, layout)
        assert abs(comm["bytes_sent"] - want) <= 0.01 * want, (comm["bytes_sent"], want)


def test_sequence_parallel_splits_the_layernorm_activations():
    plain = mgpukit.launch(layernorm_saved_bytes, 2, False, dims=mgpukit.ParallelDims(tp=2), takes_context=True)[0]
    split = mgpukit.launch(layernorm_saved_bytes, 2, True, dims=mgpukit.ParallelDims(tp=2), takes_context=True)[0]
    assert plain["logits_shape"] == split["logits_shape"] == (4, 64, 32)  # vocab-split logits: V/t each
    assert 0 < split["bytes"] <= plain["bytes"] / 2, (split["bytes"], plain["bytes"])


@pytest.mark.parametrize("strategy, kw, match", [
    ("tp", {"workers": 3}, "does not divide n_head=4"),
    ("tp", {"workers": 2, "model": "mlp-tiny"}, "runs on models|not a GPT"),
    ("tp", {"workers": 4, "layout": {"pp": 2}}, "is hybrid"),
    ("tp-native", {"workers": 4, "layout": {"pp": 2}}, "uses PyTorch's. Run hybrid"),
    ("hybrid", {"workers": 8, "layout": {"sp": True}, "options": {"zero1": True}}, "zero1 with sequence"),
    ("ddp", {"workers": 4, "layout": {"tp": 2}}, "cannot be combined with tensor parallelism"),
    ("dp-naive", {"workers": 2, "layout": {"sp": True}}, "needs tp > 1"),
    ("tp", {"workers": 2, "layout": {"tp": 1, "dp": 2}}, "needs tp >= 2"),
])
def test_bad_tensor_parallel_layouts_are_refused_before_launch(strategy, kw, match):
    with pytest.raises(ValueError, match=match):
        p = prepare(strategy, **kw)
        p.strategy.validate and p.strategy.validate(p.cfg, p.dims)
