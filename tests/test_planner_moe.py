"""The planner's mixture of experts (issue 36 item 4): a MoE shape holds every expert (parameters,
memory, split by ep and ZeRO) and computes top-k of them (FLOPs); its all-to-alls are the cost
model's (`costmodel.cp_ep`) on the ep group's link; bad MoE layouts are refused in one line; the
search tries ep; the error bar says no published MoE run is behind it. Formulas by hand on a tiny
config."""
from __future__ import annotations

import math

import pytest

from mgpukit.commands import plan as plan_cli
from mgpukit.costmodel.comm import alltoall_time, group_link
from mgpukit.costmodel.cp_ep import ep_bytes
from mgpukit.costmodel.flops import flops_per_step
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout, LayoutError, check_layout
from mgpukit.costmodel.memory import memory_per_rank, stage_params
from mgpukit.costmodel.planner import candidate_layouts, plan, search
from mgpukit.costmodel.shapes import ModelShape, active_param_count, get_shape, param_count
from mgpukit.costmodel.experts import moe_alltoall_seconds
from mgpukit.costmodel.volume import comm_bytes_per_step

H100 = load_profile("h100-ib")

# 2 layers, d 8, 2 heads, vocab 32, 16 tokens, LayerNorm, learned positions, no biases; 4 experts of width 16, top-2
TINY = ModelShape(name="tiny-moe", n_layer=2, d_model=8, n_head=2, d_ff=32, vocab=32, seq_len=16, bias=False,
                  n_expert=4, top_k=2, expert_ffn=16)
# by hand, per layer: q, k, v, o 4·8·8 = 256 (split by tp); 2 LayerNorms 2·2·8 = 32 + router 8·4 = 32
# (replicated); experts 4 × 2·8·16 = 1024. Embedding 32·8 + 16·8 = 384; head: norm 16 + lm_head 256 = 272
DENSE, EXPERTS, ENDS = 2 * (256 + 64), 2 * 1024, 384 + 272


def test_a_moe_shape_holds_every_expert_and_a_token_runs_top_k():
    assert param_count(TINY) == DENSE + EXPERTS + ENDS == 3344
    assert active_param_count(TINY) == DENSE + EXPERTS // 2 + ENDS  # 2 of 4 experts per token
    # Mixtral 8x7B: "46.7B total parameters but only uses 12.9B parameters per token" (Mistral AI, "Mixtral
    # of experts", 2023-12-11; Jiang et al. 2024 §2 say 47B / 13B)
    mixtral = get_shape("mixtral-8x7b")
    assert param_count(mixtral) == pytest.approx(46.7e9, abs=0.05e9)
    assert active_param_count(mixtral) == pytest.approx(12.9e9, abs=0.05e9)
    # Mixtral 8x22B: "141B parameters, 39B active" (Mistral AI, "Cheaper, Better, Faster, Stronger", 2024-04-17)
    big = get_shape("mixtral-8x22b")
    assert param_count(big) == pytest.approx(141e9, abs=0.5e9)
    assert active_param_count(big) == pytest.approx(39e9, abs=0.5e9)


def test_the_kits_gpt_moe_has_the_parameters_the_shape_counts():
    torch = pytest.importorskip("torch")
    from mgpukit.models.moe import MoEGPT, gpt_moe

    cfg = gpt_moe()
    model = MoEGPT(cfg)
    assert param_count(ModelShape.from_gpt_config(cfg)) == sum(p.numel() for p in model.parameters())
    assert isinstance(model, torch.nn.Module)


def test_flops_count_only_the_active_experts():
    # a dense MLP of k·width holds exactly the k experts' weights a token multiplies by; the router adds d·E
    dense_k = TINY.with_(n_expert=1, top_k=1, expert_ffn=None, d_ff=2 * 16)
    tokens, b = TINY.seq_len * 4, 4
    router = 3 * 2 * TINY.n_layer * TINY.d_model * TINY.n_expert * tokens  # forward + backward
    assert flops_per_step(TINY, b)["model"] == flops_per_step(dense_k, b)["model"] + router
    everything = TINY.with_(top_k=4)
    assert flops_per_step(TINY, b)["model"] < flops_per_step(everything, b)["model"]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_memory_holds_the_experts_split_by_ep_and_zero_shards_each_over_its_copies(zero):
    dp, ep = 2, 2
    lay = Layout(dp=dp, ep=ep, zero=zero, dtype="bf16")
    local_experts = EXPERTS / ep
    assert stage_params(TINY, lay, 0) == DENSE + ENDS + local_experts
    # ZeRO over the ranks holding a copy: the experts' over dp, the rest over dp·ep (bf16: 2 + 2 + 12 bytes)
    dense, experts = DENSE + ENDS, local_experts
    mem = memory_per_rank(TINY, lay)
    gather = 2 * (256 + 64 + 1024 / ep) * 2 if zero == 3 else 0  # ZeRO-3: two gathered layers
    assert mem["params"] == 2 * dense / (dp * ep if zero >= 3 else 1) + 2 * experts / (dp if zero >= 3 else 1) + gather
    assert mem["grads"] == 2 * dense / (dp * ep if zero >= 2 else 1) + 2 * experts / (dp if zero >= 2 else 1)
    assert mem["optimizer"] == 12 * dense / (dp * ep if zero >= 1 else 1) + 12 * experts / (dp if zero >= 1 else 1)


def test_a_dense_model_keeps_its_memory_whatever_the_new_fields():
    dense = get_shape("70b")
    lay = Layout(dp=8, tp=8, zero=1, micro_batch=1, num_micro_batches=64)
    assert dense.n_expert == 1 and stage_params(dense, lay, 0) == stage_params(dense.with_(top_k=1), lay, 0)


def test_the_all_to_alls_are_the_cost_models_bytes_on_the_ep_groups_link():
    mixtral = get_shape("mixtral-8x7b")
    for tp, link in ((1, H100.intra_node), (2, group_link(H100, 8, stride=2))):  # 8 ranks stride 2: two nodes
        lay = Layout(dp=64 // (8 * tp), ep=8, tp=tp, sp=tp > 1, micro_batch=1, num_micro_batches=4)
        C = math.ceil(1.25 * 2 * 4096 / 8)  # slots per expert per sequence
        D = 8 * 1 * C * 4096 * 2  # E·b·C·d·e: one rank's padded dispatch buffer
        assert moe_alltoall_seconds(mixtral, lay, H100) == 4 * alltoall_time(D, 8, link)
        assert (link is H100.intra_node) == (tp == 1)
        sent = ep_bytes(rows=1, seq_len=4096, d_model=4096, n_expert=8, top_k=2, capacity_factor=1.25,
                        n_moe_layers=32, ep=8, micro_batches=4, elem=2)["total"]
        assert comm_bytes_per_step(mixtral, lay)["ep"] == sent == 4 * 32 * 4 * 7 / 8 * D
        pl = plan(mixtral, 64, H100, Layout.from_global_batch(global_batch=64, dp=64 // (8 * tp), ep=8, tp=tp,
                                                              sp=tp > 1, checkpointing="full"))
        assert pl.time["comm_ep_s"] > 0 and pl.comm_bytes["ep"] > 0


@pytest.mark.parametrize("args, words", [
    (["--model", "mixtral-8x7b", "--gpus", "48", "--ep", "3"], "must divide the experts (8)"),
    (["--model", "mixtral-8x7b", "--top-k", "9"], "top_k=9 must be between 1 and the number of experts (8)"),
    (["--model", "7b", "--gpus", "16", "--ep", "2"], "has none"),
    (["--model", "mixtral-8x7b", "--gpus", "48", "--tp", "8", "--ep", "8"], "tp × pp × ep = 64 does not divide --gpus 48"),
    (["--model", "7b", "--experts", "0"], "--experts 0: must be at least 1"),
    (["--model", "mixtral-8x7b", "--capacity-factor", "0"], "capacity_factor = 0.0 is out of range"),
    (["--model", "mixtral-8x7b", "--search", "--ep", "2"], "--search chooses the layout itself"),
    (["--model", "7b", "--expert-ffn", "100"], "expert_ffn=100 is each expert's width, but the model has one dense"),
])
def test_bad_moe_flags_are_refused_in_one_line(args, words, capsys):
    assert plan_cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err


def test_check_layout_refuses_ep_that_does_not_divide_the_experts():
    with pytest.raises(LayoutError, match=r"choose ep in \[1, 2, 4, 8\]"):
        check_layout(get_shape("mixtral-8x7b"), Layout(ep=3))


def test_a_moe_that_does_not_fit_is_told_to_split_its_experts(capsys):
    assert plan_cli.main(["--model", "mixtral-8x7b", "--gpus", "8", "--profile", "h100-ib", "--global-batch", "8"]) == 0
    assert "more --ep (up to 8: the experts split)" in capsys.readouterr().out


def test_the_cli_plans_a_moe_from_flags_and_prints_the_ep_terms(capsys):
    assert plan_cli.main(["--model", "7b", "--experts", "8", "--top-k", "2", "--gpus", "16", "--ep", "8",
                          "--global-batch", "16", "--zero", "1"]) == 0
    out = capsys.readouterr().out
    assert "8 experts of ffn 11008 gated, top-2" in out and "active per token" in out
    assert "ep comm" in out and "no published MoE run: the dense band, widened" in out


def test_the_error_bar_of_a_moe_or_a_split_sequence_is_the_dense_band_widened():
    lay = Layout.from_global_batch(global_batch=64, dp=8, ep=8)
    moe, dense = plan("mixtral-8x7b", 64, H100, lay), plan("7b", 64, H100, Layout.from_global_batch(global_batch=64, dp=64))
    assert moe.error_bar.low < dense.error_bar.low and moe.error_bar.high > dense.error_bar.high
    assert "no published MoE run: the dense band" in moe.error_bar.describe()
    assert "no published" not in dense.error_bar.describe()
    assert "expert parallelism" in moe.unchecked
    long = plan("llama3-8b", 64, H100, Layout.from_global_batch(global_batch=64, dp=32, cp=2))
    assert "no published long-context (cp) run: the dense band" in long.error_bar.describe()


@pytest.mark.slow  # two searches of ~23,000 layouts (3-5 s of CPU on the shared machine)
def test_the_search_tries_ep_for_a_moe_only_and_cp_for_long_sequences():
    mixtral, dense = get_shape("mixtral-8x7b"), get_shape("7b")
    assert {lay.ep for lay in candidate_layouts(mixtral, 64, H100, global_batch=256)} == {1, 2, 4, 8}
    assert {lay.ep for lay in candidate_layouts(dense, 64, H100, global_batch=256)} == {1}
    long = get_shape("llama3-8b").with_(seq_len=32768)
    assert {lay.cp for lay in candidate_layouts(long, 64, H100, global_batch=64)} == {1, 2, 4, 8}
    plans = search(mixtral, 64, H100, global_batch=256, top=10)
    assert plans and all(pl.fits for pl in plans) and any(pl.layout.ep > 1 for pl in plans)


# The interleaved mapping is a known gap, said as one: with Megatron-Core's overlapped pipeline sends
# (`Framework.overlap_p2p`, issue 37) it predicts 527 TFLOP/s on h100-ib, +12.7 % over the published
# 468 (490 before the overlap). The MoE time model leaves out the token permutation kernels and the
# load imbalance of dropless routing (a capacity factor of 1.0 stands in for it): both make the real
# step longer. Not fitted away; strict, so the day the model covers them the marker must go.
_KNOWN_GAP = pytest.mark.xfail(strict=True, reason="MoE permutation kernels and dropless imbalance not modelled "
                                                   "(527 vs 468 TFLOP/s with pp sends overlapped)")


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), pytest.param("interleaved", 8, marks=_KNOWN_GAP)])
def test_megatron_cores_mixtral_mapping_is_predicted_near_its_published_468_tflops(schedule, v):
    """A consistency check, not a validation row (`error_bars.without_published`): Megatron-Core's
    MoE README gives 468 TFLOP/s per GPU for Mixtral 8x7B bf16 (MCore v0.9) and, for MCore v0.8, the
    mapping TP 1, EP 8, PP 4 on 64 H100, micro-batch 1, global batch 256, dropless (capacity 1.0 here)."""
    mixtral = get_shape("mixtral-8x7b").with_(capacity_factor=1.0)
    lay = Layout.from_global_batch(global_batch=256, dp=2, ep=8, pp=4, schedule=schedule, v=v, zero=1)
    pl = plan(mixtral, 64, H100, lay)
    tflops = flops_per_step(mixtral, 256)["model"] / pl.step_time_s / 64 / 1e12
    assert tflops == pytest.approx(468, rel=0.10) and pl.fits


def test_a_moe_model_file_round_trips_and_a_dense_ones_has_no_expert_keys():
    from mgpukit.costmodel.shapes import shape_from_dict, shape_to_dict

    mixtral = get_shape("mixtral-8x7b")
    assert shape_from_dict(shape_to_dict(mixtral)) == mixtral
    assert {"experts", "top_k", "expert_ffn", "capacity_factor"} <= set(shape_to_dict(mixtral))
    assert not {"experts", "top_k", "expert_ffn", "capacity_factor"} & set(shape_to_dict(get_shape("70b")))
