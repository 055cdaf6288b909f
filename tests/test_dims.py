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
