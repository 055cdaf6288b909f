"""The planner's time model, piece by piece: GEMM shapes on the roofline, memory-bound
kernels, tp overlap, ZeRO-3 prefetch bounded by compute, uneven pipeline stages, context
parallelism. Closed forms checked against hand computations, not just "it ran"."""

import dataclasses

import pytest

from mgpukit.costmodel import Layout, LayoutError, check_layout, get_shape, load_profile, memory_per_rank, plan, step_time
from mgpukit.commands import plan as plan_cli
from mgpukit.costmodel import comm_bytes_per_step
from mgpukit.costmodel.comm import allgather_time, group_link, reduce_scatter_time
from mgpukit.costmodel.memory import stage_memory
from mgpukit.costmodel.kernels import depth_efficiency, gemm_seconds, wave_efficiency
from mgpukit.costmodel.shapes import layer_param_split

A100 = load_profile("a100-nvlink")
H100 = load_profile("h100-nvlink")


# ----------------------------------------------------------------------------- GEMMs


def test_wave_quantisation_as_in_nvidias_guide():
    """108 SMs: 108 tiles of 256×128 fill one wave exactly; one tile more needs a second wave
    that is almost empty (NVIDIA, Matrix Multiplication Background, §3.2)."""
    g = dataclasses.replace(A100.gemm, tiles=((256, 128),))
    hw = dataclasses.replace(A100, gemm=g)
    assert wave_efficiency(256 * 12, 128 * 9, hw) == pytest.approx(1.0)  # 108 tiles
    assert wave_efficiency(256 * 109, 128, hw) == pytest.approx(109 / 216)
    assert wave_efficiency(100, 128, hw) == pytest.approx(100 / 256 / 108)  # one partial tile, one wave
    # the best of several tiles: 128×128 quantises 2048×2304 better than 256×128
    assert wave_efficiency(2048, 2304, A100) == pytest.approx(288 / 324)
    assert wave_efficiency(2048, 2304, A100) > wave_efficiency(2048, 2304, hw)


def test_gemm_roofline_and_depth():
    """A large square GEMM runs at peak · efficiency · k/(k + k_half), after the table's fixed
    latency; on the flat model (no [gemm] table) the scores Q·Kᵀ with a head dimension of 64 are memory-bound: their time is
    their bytes over HBM bandwidth. The depth term makes them compute-bound at k/(k+128) = 1/3."""
    n = 108 * 256  # whole waves
    t = gemm_seconds(n, 128 * 10, 8192, A100, dtype="bf16")
    rate = 312e12 * A100.gemm.efficiency * depth_efficiency(8192, A100)
    assert t == pytest.approx(A100.gemm.latency + 2 * n * 1280 * 8192 / rate)
    assert depth_efficiency(128, A100) == pytest.approx(0.5)
    s, hd, batch = 4096, 64, 32
    flat = dataclasses.replace(A100, gemm=None)  # no table: peak · compute_efficiency, no shape effects
    scores = gemm_seconds(s, s, hd, flat, batch=batch)
    assert scores == pytest.approx(2 * batch * (2 * s * hd + s * s) / A100.memory_bandwidth)
    shaped = gemm_seconds(s, s, hd, A100, batch=batch)
    assert shaped == pytest.approx(A100.gemm.latency + 2 * batch * s * s * hd / (312e12 * A100.gemm.efficiency / 3), rel=0.005)
    assert shaped > scores
    assert gemm_seconds(n, 1280, 8192, flat) == pytest.approx(2 * n * 1280 * 8192 / (312e12 * A100.compute_efficiency))


def test_small_models_use_the_gpu_worse():
    """Same FLOPs per GPU, smaller GEMMs: the shape-aware model gives the small model a lower
    MFU; the flat model of old gave both the same."""
    small, big = get_shape("1.3b"), get_shape("13b")
    lay = Layout(micro_batch=1, num_micro_batches=4)
    assert step_time(small, lay, H100)["mfu"] < step_time(big, lay, H100)["mfu"]


# ------------------------------------------------------------------- memory-bound kernels


def test_memory_bound_kernels_are_charged():
    shape = get_shape("1.3b")
    lay = Layout(micro_batch=2, num_micro_batches=2)
    flash = step_time(shape, lay, A100)
    unfused = step_time(shape, dataclasses.replace(lay, flash_attention=False), A100)
    assert flash["memory_s"] > 0
    assert unfused["memory_s"] > 2 * flash["memory_s"]  # the s×s softmax and dropout through HBM
    # halving HBM bandwidth doubles exactly the memory-bound part
    slow = step_time(shape, lay, dataclasses.replace(A100, memory_bandwidth=A100.memory_bandwidth / 2))
    assert slow["memory_s"] == pytest.approx(2 * flash["memory_s"])
    assert slow["optimizer_s"] == pytest.approx(2 * flash["optimizer_s"])
    # sequence parallelism splits the norms, dropouts and residuals over the tp group
    tp = Layout(tp=8, micro_batch=2, num_micro_batches=2)
    assert step_time(shape, dataclasses.replace(tp, sp=True), A100)["memory_s"] < step_time(shape, tp, A100)["memory_s"]


# --------------------------------------------------------------------------- tp overlap


def test_tp_overlap_hides_comm_behind_the_layers_gemms():
    shape = get_shape("13b")
    lay = Layout(tp=8, sp=True, micro_batch=1, num_micro_batches=4)
    # kernels only: at one sequence per GPU and tp=8 the host's launches are a bound of their
    # own (eager PyTorch issues each layer's ~50 ops), which overlap cannot move
    kernels = H100.kernels_only()
    exposed = step_time(shape, lay, kernels)
    hidden = step_time(shape, dataclasses.replace(lay, tp_overlap=True), kernels)
    assert step_time(shape, lay, H100)["launch_bound"] > 0.9
    assert exposed["comm_tp_s"] > 0 and hidden["comm_tp_s"] == 0.0  # NVLink: comm < GEMMs
    assert hidden["total_s"] == pytest.approx(exposed["total_s"] - exposed["comm_tp_s"])
    # over PCIe the collectives outlast the GEMMs: only the excess is exposed
    pcie = load_profile("h100-pcie").kernels_only()
    slow, slow_hidden = step_time(shape, lay, pcie), step_time(shape, dataclasses.replace(lay, tp_overlap=True), pcie)
    assert 0 < slow_hidden["comm_tp_s"] < slow["comm_tp_s"]
    # what it hides is GEMM time: each layer's collectives behind the layer's GEMMs, the
    # vocabulary-parallel ends' behind the embedding's and the lm_head's — at most every GEMM
    assert 0.9 * slow["compute_s"] < slow["comm_tp_s"] - slow_hidden["comm_tp_s"] <= slow["compute_s"] * (1 + 1e-9)


# ------------------------------------------------------------------------------- ZeRO-3


def test_zero3_prefetch_is_bounded_by_the_layers_compute():
    """Fast link: only the first gather, the first backward gather and the last reduce-scatter
    are exposed. Slow link: each layer also exposes what its compute cannot hide."""
    shape = get_shape("7b")
    lay = Layout(dp=8, zero=3, micro_batch=4, num_micro_batches=1)
    t = step_time(shape, lay, H100)
    split, rep = layer_param_split(shape)
    layer_bytes = (split + rep) * 2
    link = group_link(H100, 8)
    ag, rs = allgather_time(layer_bytes, 8, link), reduce_scatter_time(layer_bytes, 8, link)
    assert t["comm_dp_s"] == pytest.approx(2 * ag + rs)
    slow_hw = dataclasses.replace(H100, intra_node=dataclasses.replace(H100.intra_node, beta=H100.intra_node.beta / 50))
    slow = step_time(shape, lay, slow_hw)
    link = group_link(slow_hw, 8)
    ag, rs = allgather_time(layer_bytes, 8, link), reduce_scatter_time(layer_bytes, 8, link)
    assert slow["comm_dp_s"] > 2 * ag + rs  # per-layer excess now shows
    assert slow["comm_dp_s"] < 32 * (2 * ag + rs)  # but compute still hides part of every layer's


# ------------------------------------------------------------------- uneven pipeline stages


def test_uneven_stages_the_slowest_sets_the_pace():
    shape = get_shape("7b").with_(vocab=128256)  # 32 layers; Llama 3's vocabulary: lm_head ≈ 2.6 layers
    even = Layout(pp=4, num_micro_batches=16)
    explicit = dataclasses.replace(even, stage_layers=(8, 8, 8, 8))
    assert step_time(shape, explicit, H100)["total_s"] == pytest.approx(step_time(shape, even, H100)["total_s"])
    uneven = dataclasses.replace(even, stage_layers=(6, 8, 8, 10))
    t, e = step_time(shape, uneven, H100), step_time(shape, even, H100)
    assert t["slowest_stage"] == 3 and t["total_s"] > e["total_s"]
    # give the head's stage fewer layers (Llama 3's recipe): the balance improves on the even split
    balanced = dataclasses.replace(even, stage_layers=(9, 9, 8, 6))
    assert step_time(shape, balanced, H100)["total_s"] < e["total_s"]
    assert stage_memory(shape, uneven, 3)["params"] > stage_memory(shape, even, 3)["params"]


def test_uneven_stages_are_validated():
    shape = get_shape("7b")
    with pytest.raises(LayoutError, match="add up"):
        check_layout(shape, Layout(pp=4, stage_layers=(8, 8, 8, 9)))
    with pytest.raises(LayoutError, match="one per pipeline stage"):
        Layout(pp=4, stage_layers=(16, 16))
    with pytest.raises(LayoutError, match="divisible by v"):
        check_layout(shape, Layout(pp=4, schedule="interleaved", v=2, num_micro_batches=8, stage_layers=(7, 9, 9, 7)))
    check_layout(shape, Layout(pp=4, stage_layers=(7, 9, 9, 7)))  # 32 layers, any split
    # interleaved: the first and last stage may hold one layer fewer than a multiple of v (Llama 3)
    check_layout(shape.with_(n_layer=30), Layout(pp=4, schedule="interleaved", v=2, num_micro_batches=8,
                                                 stage_layers=(7, 8, 8, 7)))
    with pytest.raises(LayoutError, match="stage 1 does not"):
        check_layout(shape.with_(n_layer=30), Layout(pp=4, schedule="interleaved", v=2, num_micro_batches=8,
                                                     stage_layers=(8, 7, 8, 7)))
    with pytest.raises(LayoutError, match="stage 0 does not"):  # two fewer is not one chunk short
        check_layout(shape.with_(n_layer=28), Layout(pp=4, schedule="interleaved", v=4, num_micro_batches=8,
                                                     stage_layers=(6, 8, 8, 6)))


# --------------------------------------------------------------------- context parallelism


def test_context_parallel_ring_attention():
    long = get_shape("7b").with_(seq_len=32768)
    base = Layout(dp=1, cp=1, micro_batch=1, num_micro_batches=2)
    cp = dataclasses.replace(base, cp=8)
    assert cp.world_size == 8 and cp.global_batch == base.global_batch
    t1, t8 = step_time(long, base, H100), step_time(long, cp, H100)
    assert t8["total_s"] < t1["total_s"] / 6  # 8 ranks share each sequence
    assert t8["comm_cp_s"] == 0.0  # NVLink: each K/V hop hides behind 1/8 of a long attention core
    assert memory_per_rank(long, cp)["activations"] == pytest.approx(memory_per_rank(long, base)["activations"] / 8)
    # across nodes, one GPU per node, a short sequence: the ring's hops outlast the chunks' compute
    ib = dataclasses.replace(load_profile("h100-ib"), gpus_per_node=1)
    short = get_shape("7b").with_(seq_len=4096)
    assert step_time(short, dataclasses.replace(cp, micro_batch=1), ib)["comm_cp_s"] > 0
    kv = 2 * (32768 // 8) * long.kv_dim * 2  # this rank's K and V chunk, bf16
    assert comm_bytes_per_step(long, cp)["cp"] == pytest.approx(2 * long.n_layer * 7 * 3 * kv)  # fwd + bwd (×2)
    with pytest.raises(LayoutError, match="cp=3 must divide seq_len"):
        check_layout(short, dataclasses.replace(base, cp=3))


def test_plan_cli_takes_cp_and_stage_layers(capsys):
    assert plan_cli.main(["--model", "7b", "--gpus", "16", "--tp", "2", "--pp", "2", "--cp", "2",
                          "--stage-layers", "15,17", "--micro-batches", "8", "--tp-overlap"]) == 0
    out = capsys.readouterr().out
    assert "cp 2" in out and "stages 15/17" in out and "cp comm" in out and "memory-bound" in out
    assert plan_cli.main(["--model", "7b", "--gpus", "16", "--pp", "2", "--stage-layers", "15,16"]) == 2
    assert "add up" in capsys.readouterr().err
    p = plan("7b", 16, "h100-nvlink", Layout(dp=4, cp=2, tp=2, num_micro_batches=2))
    assert p.fits and p.time["comm_cp_s"] >= 0


def test_gemm_table_round_trips_through_toml(tmp_path):
    from mgpukit.costmodel import save_profile

    path = save_profile(A100, tmp_path / "a100.toml", comment="round trip")
    again = load_profile(str(path))
    assert again.gemm == A100.gemm and again == A100
