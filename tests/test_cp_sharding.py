"""Context-parallel ranks hold the same weights: their gradients are reduced, and ZeRO shards,
over ``dp · cp`` ranks (Megatron-Core's distributed optimizer and DDP use the ``intra_dp_cp_group``,
module ``megatron.core.optimizer``; torchtitan's FSDP the ``dp_shard_cp`` mesh).

The planner sharded over ``dp`` alone: a 340B layout at tp 8 × pp 8 × cp 2 on 128 GPUs (dp 1)
was charged the whole fp32 optimizer state and "did not fit", and a dp-1 cp-2 layout reduced no
gradients at all."""
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.memory import memory_per_rank, model_state_bytes, stage_memory, stage_params
from mgpukit.costmodel.shapes import ModelShape, get_shape
from mgpukit.costmodel.steptime import ADAM_BYTES_PER_PARAM, step_time
from mgpukit.costmodel.volume import comm_bytes_per_step

# a Nemotron-4-340B-sized GQA model (96 layers, d 18432, ffn 73728, 96 heads / 8 kv, seq 4096)
BIG = ModelShape(name="340b-like", n_layer=96, d_model=18432, n_head=96, n_kv_head=8, d_ff=73728,
                 vocab=256000, seq_len=4096, bias=False, learned_pos=False)


def _layout(**kw):
    opts = dict(tp=8, pp=8, schedule="interleaved", v=12, sp=True, micro_batch=1, checkpointing="selective",
                dtype="fp8", zero=1)
    opts.update(kw)
    return Layout.from_global_batch(global_batch=64, **opts)


def test_zero_shards_the_optimizer_state_over_dp_times_cp():
    psi = 1e9
    for zero, key, per in ((1, "optimizer", 12), (2, "grads", 2), (3, "params", 2)):
        one = model_state_bytes(psi, Layout(dp=2, cp=1, zero=zero))[key]
        cp2 = model_state_bytes(psi, Layout(dp=2, cp=2, zero=zero))[key]
        assert one == psi * per / 2
        assert cp2 == psi * per / 4


def test_a_340b_layout_on_128_gpus_fits_with_its_optimizer_sharded_over_cp():
    h100 = load_profile("h100-ib")
    usable = h100.memory_bytes * h100.usable_memory
    lay = _layout(dp=1, cp=2)
    for s in lay.distinct_stages(BIG.n_layer):
        assert stage_memory(BIG, lay, s)["optimizer"] == 12 * stage_params(BIG, lay, s) / 2
    assert memory_per_rank(BIG, lay)["total"] < usable  # old code: 12·Ψ unsharded, 96 GiB > 71.7 GiB usable


def test_cp_ranks_reduce_their_gradients_even_at_dp_1():
    shape, h100 = get_shape("7b"), load_profile("h100-nvlink")
    lay = Layout(dp=1, cp=2, tp=2, micro_batch=1, num_micro_batches=2, zero=1)
    t = step_time(shape, lay, h100, overlap_dp=False)
    assert t["comm_dp_s"] > 0  # old code: 0, no gradient sync across the two cp ranks
    assert comm_bytes_per_step(shape, lay)["dp"] > 0
    psi = stage_params(shape, lay, 0)
    assert t["optimizer_s"] == ADAM_BYTES_PER_PARAM * psi / 2 / h100.memory_bandwidth
