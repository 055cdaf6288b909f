"""Megatron-Core overlaps the interleaved schedule's pipeline sends with compute.

Megatron-LM's ``overlap_p2p_comm`` is on by default (its CLI flag is
``--no-overlap-p2p-communication``) and forced off outside the interleaved schedule: ``schedules.py``
issues a chunk's isend/irecv, runs the next chunk, then waits. The planner charged every hop as
exposed, for every framework (GPT-3 175B, 512 H100, tp 4 pp 8 v 6 fp8: 0.44 s of a 12.6 s step)."""
import dataclasses

from mgpukit.costmodel.frameworks import get_framework
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import get_shape
from mgpukit.costmodel.steptime import step_time

H100 = load_profile("h100-ib")


def _layout(schedule="interleaved", v=6):
    return Layout.from_global_batch(global_batch=256, dp=2, tp=4, pp=8, sp=True, schedule=schedule, v=v,
                                    micro_batch=1, checkpointing="selective")


def test_megatron_core_hides_the_interleaved_sends_behind_the_chunks():
    shape = get_shape("175b")
    core = step_time(shape, _layout(), H100, framework="megatron-core")
    waited = step_time(shape, _layout(), H100, framework=get_framework("megatron-core").with_(overlap_p2p=False))
    assert waited["comm_pp_s"] > 0
    assert core["comm_pp_s"] == 0.0  # a hop (one 2048 x 12288 activation / tp) is shorter than a chunk's compute
    assert core["total_s"] < waited["total_s"]


def test_the_overlap_is_forced_off_outside_the_interleaved_schedule_and_off_for_megatron_2021():
    shape = get_shape("175b")
    one_f_one_b = _layout(schedule="1f1b", v=1)
    assert step_time(shape, one_f_one_b, H100, framework="megatron-core")["comm_pp_s"] > 0
    assert step_time(shape, _layout(), H100, framework="megatron-lm-2021")["comm_pp_s"] > 0
    assert get_framework("megatron-core").overlap_p2p and not get_framework("megatron-lm-2021").overlap_p2p


def test_a_hop_longer_than_its_chunk_shows_the_excess():
    """A slow link (the hop ~10x the chunk): what the chunk cannot hide stays exposed."""
    shape = get_shape("175b").with_(n_layer=48)
    slow = dataclasses.replace(H100, inter_node=dataclasses.replace(H100.inter_node, beta=H100.inter_node.beta / 2000))
    lay = Layout.from_global_batch(global_batch=16, dp=1, tp=8, pp=2, schedule="interleaved", v=2, micro_batch=1)
    core = step_time(shape, lay, slow, framework="megatron-core")
    waited = step_time(shape, lay, slow, framework=get_framework("megatron-core").with_(overlap_p2p=False))
    assert 0 < core["comm_pp_s"] < waited["comm_pp_s"]
