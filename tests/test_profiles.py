"""Hardware profiles: every shipped file loads, cites a source for every figure, and the loader
finds ``this-machine`` in the user's cache before falling back to the shipped placeholder."""

import re

import pytest

from mgpukit.costmodel.hardware import (
    HardwareProfile,
    ProfileNotFoundError,
    data_dir,
    list_profiles,
    load_profile,
    save_profile,
)

SHIPPED = ["a100-nvlink", "h100-nvlink", "h100-pcie", "h100-ib", "this-machine-default"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads_with_sane_figures(name):
    p = load_profile(name, search_dirs=[data_dir()])
    assert isinstance(p, HardwareProfile) and p.name == name
    assert p.memory_bytes > 1e9 and p.memory_bandwidth > 1e9 and p.gpus_per_node >= 1
    for dtype in ("fp32", "tf32", "bf16", "fp16"):
        assert p.flops(dtype) > 0
    assert p.intra_node.alpha > 0 and p.inter_node.alpha > 0
    assert p.inter_node.beta <= p.intra_node.beta  # the network is never faster than inside a node
    assert 0 < p.compute_efficiency <= 1 and 0 < p.usable_memory <= 1


@pytest.mark.parametrize("name", SHIPPED)
def test_every_figure_has_a_comment(name):
    """Each ``key = number`` line carries a ``#`` comment naming its source or assumption."""
    for line in (data_dir() / f"{name}.toml").read_text().splitlines():
        if re.match(r"^\s*\w+\s*=\s*[-+0-9.]", line):
            assert "#" in line and len(line.split("#", 1)[1].strip()) > 5, f"uncited figure: {line!r}"


def test_datasheet_figures():
    """NVIDIA datasheets: A100 312 TFLOPS bf16 dense, H100 SXM 989.5, H100 PCIe 756."""
    assert load_profile("a100-nvlink").flops("bf16") == 312e12
    assert load_profile("h100-nvlink").flops("bf16") == 989.5e12
    assert load_profile("h100-pcie").flops("bf16") == 756e12
    assert load_profile("h100-ib").inter_node.beta <= 50e9  # NDR 400 Gb/s = 50 GB/s per GPU


def test_unknown_profile_names_the_available_ones():
    with pytest.raises(ProfileNotFoundError) as err:
        load_profile("h200-nope")
    message = str(err.value)
    assert "h200-nope" in message
    for name in SHIPPED:
        assert name in message
    with pytest.raises(ValueError):  # also a ValueError, for callers that catch that
        load_profile("h200-nope")
    with pytest.raises(ValueError, match="dtype"):
        load_profile("h100-nvlink").flops("int4")


def test_list_profiles():
    names = list_profiles(search_dirs=[data_dir()])
    assert set(SHIPPED) <= set(names) and "this-machine" in names


def test_this_machine_falls_back_to_the_default(tmp_path):
    empty_cache = tmp_path / "cache"
    p = load_profile("this-machine", search_dirs=[empty_cache, data_dir()])
    assert p.name == "this-machine-default"


def test_this_machine_prefers_the_calibrated_file(tmp_path):
    cache = tmp_path / "cache"
    calibrated = HardwareProfile.from_dict({**load_profile("this-machine-default").to_dict(),
                                            "name": "this-machine", "description": "measured"})
    save_profile(calibrated, cache / "this-machine.toml", comment="measured by a test")
    assert load_profile("this-machine", search_dirs=[cache, data_dir()]) == calibrated


def test_save_and_load_round_trip(tmp_path):
    original = load_profile("h100-ib")
    path = save_profile(original, tmp_path / "copy.toml", comment="copy of h100-ib\nsecond line")
    assert path.read_text().startswith("# copy of h100-ib\n# second line\n")
    assert load_profile(str(path)) == original  # a path works as a name too


def test_missing_key_is_named():
    d = load_profile("a100-nvlink").to_dict()
    del d["intra_node"]
    with pytest.raises(ValueError, match="intra_node"):
        HardwareProfile.from_dict(d)
