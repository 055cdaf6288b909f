"""ParallelDims: validation that says what to change, rank coordinates, the DeviceMesh."""
import pytest
import torch.distributed as dist

import mgpukit
from mgpukit.runtime.dims import ParallelDims


def test_product_must_equal_world_size_and_the_message_says_what_to_change():
    with pytest.raises(ValueError, match=r"dp\*tp\*pp = 2\*2\*1 = 4, but there are 8 workers.*dp=4"):
        ParallelDims(dp=2, tp=2, pp=1, world_size=8)
    with pytest.raises(ValueError, match="positive integer"):
        ParallelDims(dp=0)
    assert ParallelDims(dp=2, tp=2, pp=2).world_size == 8


def test_coordinates_put_tensor_parallel_innermost():
    dims = ParallelDims(dp=2, tp=2, pp=2)
    assert [tuple(dims.coords(r).values()) for r in range(8)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]


def _mesh_groups():
    mesh = ParallelDims(dp=2, tp=2, pp=1).build_mesh("cpu")
    return {axis: dist.get_process_group_ranks(mesh.get_group(axis)) for axis in ("dp", "tp")}


def test_mesh_groups_match_the_coordinates():
    out = mgpukit.launch(_mesh_groups, 4)
    assert out[0] == {"dp": [0, 2], "tp": [0, 1]}
    assert out[3] == {"dp": [1, 3], "tp": [2, 3]}


# ---- nodes: tp inside a node, pp and dp across (runtime/nodes.py)

def test_with_tp_fastest_a_tp_group_stays_on_one_node_and_pp_crosses_first():
    from mgpukit.runtime.nodes import NodeLayout

    nodes = NodeLayout.uniform(16, 8)  # 2 nodes of 8, e.g. 2 DGX boxes
    assert nodes.count == 2 and nodes.ranks_per_node == 8 and nodes.node_of(9) == 1
    assert nodes.crossing_axes(ParallelDims(dp=2, tp=4, pp=2)) == ["pp"]
    assert nodes.crossing_axes(ParallelDims(dp=4, tp=4)) == ["dp"]
    assert nodes.crossing_axes(ParallelDims(dp=2, tp=8)) == ["dp"]
    assert nodes.check(ParallelDims(dp=2, tp=8)) is None
    # tp=16 > 8 ranks per node crosses; so does tp=3, which does not divide 8 (24 ranks)
    assert nodes.crossing_axes(ParallelDims(tp=16)) == ["tp"]
    assert NodeLayout.uniform(24, 8).crossing_axes(ParallelDims(dp=8, tp=3)) == ["dp", "tp"]


def test_a_tp_group_across_nodes_is_warned_about_with_what_to_change():
    from mgpukit.runtime.nodes import NodeLayout, NodeLayoutWarning

    with pytest.warns(NodeLayoutWarning, match=r"tp=4 .*across nodes \(2 ranks per node\).*divides 2"):
        NodeLayout.uniform(4, 2).warn(ParallelDims(tp=4))


def test_node_layout_is_read_from_the_launchers_environment():
    from mgpukit.runtime.nodes import from_env, node_rank_from_env

    assert node_rank_from_env({"GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) == 1
    assert node_rank_from_env({"SLURM_NODEID": "3"}) == 3
    assert node_rank_from_env({}) == 0
    assert from_env(4, {"LOCAL_WORLD_SIZE": "2"}).of_rank == (0, 0, 1, 1)
    assert from_env(4, {}).count == 1


def _node_view():
    ctx = mgpukit.current()
    return {"node": ctx.node, "pp_crosses": ctx.spans_nodes(ctx.axis_ranks("pp")),
            "dp_crosses": ctx.spans_nodes(ctx.axis_ranks("dp"))}


def test_emulated_ranks_sit_on_the_profiles_nodes():
    import dataclasses

    from mgpukit.costmodel import load_profile

    two_per_node = dataclasses.replace(load_profile("h100-ib"), gpus_per_node=2)
    out = mgpukit.launch(_node_view, 4, mode="emulated", profile=two_per_node,
                         dims=ParallelDims(dp=2, pp=2))
    assert [o["node"] for o in out] == [0, 0, 1, 1]
    assert all(o["pp_crosses"] and not o["dp_crosses"] for o in out)
