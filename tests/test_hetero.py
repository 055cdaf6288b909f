"""Heterogeneous data parallelism: unequal batches with an exact gradient; a mixed cluster.

Method. (1) gpt-tiny on 2 gloo workers with a 6:2 split of an 8-row global batch, against the
single-process reference on the same global batches (losses, gradient norms, final weights at
torch's fp32 tolerances); the same run with the loss weighting switched off must fail parity
(the plain average over-weights the small shard's rows). (2) Emulated DDP on a mixed cluster
(rank 0 computes on the A100 profile, rank 1 on the H100; links of h100-nvlink): an even split
runs at the A100's pace, and the split `balanced_split` picks runs within 5 % of
`predicted_mixed_step` (the analytic model, `costmodel.gpt_step`) — and faster.
"""
from __future__ import annotations

import pytest

import mgpukit
from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import load_profile
from mgpukit.prepare import prepare
from mgpukit.training import hetero

PROFILES = ("a100-nvlink", "h100-nvlink")


def test_unequal_batches_keep_the_gradient_exact():
    rec = mgpukit.run("dp-naive", workers=2, steps=3, global_batch=8, options={"batch_split": "6,2"})
    assert rec["parity"]["ok"], rec["parity"]


def test_without_the_weights_parity_fails(monkeypatch):
    """The test of the test (workers are forked, so they inherit the patch)."""
    monkeypatch.setattr("mgpukit.parallelize.loss_weight", lambda cfg, rank, n: 1.0)
    rec = mgpukit.run("dp-naive", workers=2, steps=3, global_batch=8, options={"batch_split": "6,2"})
    assert not rec["parity"]["ok"]


@pytest.mark.parametrize("split, match", [("6,3", "adds up to 9"), ("8", "gives 1 ranks"),
                                          ("5,3", "micro_batches=2")])
def test_bad_splits_are_refused(split, match):
    with pytest.raises(ValueError, match=match):
        prepare("dp-naive", workers=2, global_batch=8, micro_batches=2 if split == "5,3" else 1,
                options={"batch_split": split})


def test_rank_profiles_need_emulation():
    with pytest.raises(ValueError, match="emulated"):
        prepare("ddp", workers=2, mode="cpu", options={"rank_profiles": ",".join(PROFILES)})


def _emulated(split):
    # kernels only: the closed form counts no host launches (they would swamp a tiny model)
    return mgpukit.run("ddp", workers=2, steps=3, global_batch=32, mode="emulated",
                       profile=load_profile("h100-nvlink").kernels_only(),
                       parity=False, options={"batch_split": ",".join(map(str, split)),
                                              "rank_profiles": ",".join(PROFILES)})


def test_rebalanced_mixed_cluster_runs_at_the_predicted_time():
    cfg = RunConfig(global_batch=32)
    split = hetero.balanced_split(cfg, PROFILES, "h100-nvlink")
    assert split[0] < split[1]  # the A100 gets fewer rows
    even, balanced = _emulated((16, 16)), _emulated(split)
    t_even, t_bal = even["step_time_s"][-1], balanced["step_time_s"][-1]
    slow = hetero.predicted_mixed_step(cfg, (16, 16), (PROFILES[0],) * 2, "h100-nvlink")  # all-A100
    assert t_even == pytest.approx(slow, rel=0.05)  # the even split runs at the slow rank's pace
    assert t_bal == pytest.approx(hetero.predicted_mixed_step(cfg, split, PROFILES, "h100-nvlink"), rel=0.05)
    assert t_bal < 0.8 * t_even
