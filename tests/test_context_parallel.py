"""Context parallelism (ring attention): exact against plain attention and against one process,
bytes and messages against the cost model, the causal load balance, refusals before launch."""
import pytest

import mgpukit
from mgpukit.costmodel.cp_ep import cp_bytes, cp_messages
from mgpukit.experiment import run
from mgpukit.prepare import prepare
from mgpukit.strategies.context_parallel import ring
from mgpukit.strategies.context_parallel.check import ring_vs_full


@pytest.mark.parametrize("cp", [2, 4])
def test_ring_attention_equals_causal_attention_forward_and_backward(cp):
    """Method: every rank computes full causal SDPA on the whole sequence and ring attention on
    its two chunks; outputs and dq, dk, dv at its tokens agree at fp32 tolerance."""
    out = mgpukit.launch(ring_vs_full, cp, dims=mgpukit.ParallelDims(dp=cp, cp=cp), echo=False,
                         takes_context=True)
    S = 2 * (16 // cp) * 2 * 8 * 4  # one rank's K block: batch 2 × 16/cp tokens × 2 heads × 8 × fp32
    for r in out:
        assert max(r["max_abs_diff"].values()) < 1e-5, r["max_abs_diff"]
        # one layer: forward (cp-1)·2S, backward (cp-1)·4S + 2S; cp-1 + cp messages
        assert r["bytes_sent"] == cp_bytes(rows=2, seq_len=16, d_model=16, n_layer=1, cp=cp)["total"]
        assert r["bytes_sent"] == (cp - 1) * 2 * S + (cp - 1) * 4 * S + 2 * S
        assert r["messages"] == 2 * cp - 1


@pytest.mark.parametrize("workers, layout", [(2, {}), (4, {}), (4, {"dp": 2, "cp": 2})])
def test_cp_matches_one_process(workers, layout):
    """Numerical parity (loss, gradient norm, every weight after each step) against the
    single-process reference on the same global batches, fp32 default tolerances."""
    rec = run("cp", workers=workers, steps=2, layout=layout)
    assert rec["parity"]["ok"] and rec["parity"]["weights_checked"], rec["parity"]
    assert rec["layout"]["cp"] * rec["layout"]["dp"] == workers


def test_bytes_and_messages_per_step_match_the_cost_model():
    rec = run("cp", workers=4, steps=2, layout={"dp": 2, "cp": 2}, parity=False)
    layout = rec["layout"]
    kw = dict(n_layer=4, cp=2, micro_batches=1)
    ring_bytes = cp_bytes(rows=layout["micro_batch"], seq_len=64, d_model=64, **kw)["total"]
    msgs = cp_messages(**kw)
    assert rec["theory"]["cp_bytes_per_step"] == ring_bytes
    for comm in rec["comm"].values():
        assert comm["by_axis"]["cp"] == 2 * ring_bytes  # two steps, exactly
        assert comm["by_axis"]["dp"] == 2 * rec["theory"]["dp_bytes_per_step"]
        assert comm["collectives"]["send"] == 2 * (msgs["fwd"] + msgs["bwd"])


def test_a_broken_merge_is_caught_by_parity(monkeypatch):
    """The test of the test: dropping every block after the first (no log-sum-exp merge)."""
    monkeypatch.setattr(ring, "_merge", lambda o, lse, o_s, lse_s: (o_s, lse_s) if o is None else (o, lse))
    rec = run("cp", workers=2, steps=1)
    assert not rec["parity"]["ok"]


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_causal_work_is_balanced_over_the_ring(cp):
    """Rank i holds chunks i and 2cp-1-i: each rank computes 2cp+1 chunk pairs (contiguous
    slices would give rank i 4i+3)."""
    assert ring.blocks_per_rank(cp) == [2 * cp + 1] * cp


@pytest.mark.parametrize("strategy, kw, match", [
    ("cp", {"workers": 3}, "2·cp = 6 chunks"),
    ("cp", {"workers": 2, "model": "mlp-tiny"}, "runs on models"),
    ("cp", {"workers": 4, "layout": {"tp": 2}}, "data parallelism only"),
    ("cp", {"workers": 2, "layout": {"cp": 1, "dp": 2}}, "needs cp >= 2"),
    ("ddp", {"workers": 4, "layout": {"cp": 2}}, "comes with its strategy"),
])
def test_bad_context_parallel_layouts_are_refused_before_launch(strategy, kw, match):
    with pytest.raises(ValueError, match=match):
        p = prepare(strategy, **kw)
        p.strategy.validate and p.strategy.validate(p.cfg, p.dims)


def test_cp_runs_on_the_virtual_clock_with_parity():
    """Emulated: the ring's messages charged on the profile's link, data still real."""
    rec = run("cp", workers=2, steps=2, mode="emulated", profile="h100-nvlink")
    assert rec["mode"] == "emulated" and rec["parity"]["ok"], rec["parity"]
    recvs = [e for e in rec["timeline"] if e["kind"] == "recv"]
    assert recvs and all(e["wire_s"] > 0 for e in recvs)


def test_a_32k_sequence_runs_in_shape_mode_with_the_predicted_bytes():
    """Emulated at real scale (fake tensors, labelled emulated): Llama-sized layers (2 of 32) at
    32,768 tokens, cp 4 on 4 H100s; the ring's bytes under cp, the gradients' under dp."""
    rec = run("cp", workers=4, mode="emulated", profile="h100-nvlink", shape=True, model="llama-7b", steps=1,
              global_batch=1, options={"model_sizes": {"n_layer": 2, "seq_len": 32768}})
    assert rec["mode"] == "emulated" and rec["shape"] and rec["step_time_s"][0] > 0
    t = rec["theory"]
    assert t["cp_bytes_per_step"] == cp_bytes(rows=1, seq_len=32768, d_model=4096, n_layer=2, cp=4)["total"]
    assert rec["comm"]["0"]["by_axis"] == {"cp": t["cp_bytes_per_step"], "dp": t["dp_bytes_per_step"]}
