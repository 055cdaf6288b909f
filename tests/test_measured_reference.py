"""`mgpukit.lessons.measured`: the real H100's figures beside the profile's prediction of the same kernel."""
import pytest

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.kernels import gemm_seconds
from mgpukit.lessons import measured


def test_each_gemm_row_is_the_file_and_the_profile_on_the_same_shape():
    ref = measured.load_h100()
    rows = measured.gemm_rows("h100-nvlink", reference=ref)
    assert len(rows) == len(ref["gemm"])
    prof = load_profile("h100-nvlink")
    for raw, row in zip(ref["gemm"], rows):
        assert row["measured_s"] == raw["s"]
        assert row["predicted_s"] == gemm_seconds(raw["m"], raw["n"], raw["k"], prof, dtype=row["dtype"])
        assert row["measured_tflops"] == pytest.approx(raw["tflops"], rel=1e-3)  # the file's own FLOP count


def test_a_llama_layer_sums_its_twelve_gemms_and_its_attention():
    ref = measured.load_h100()
    layer = measured.llama_tp8_layer("70b", "h100-ib", reference=ref)
    raw = [g for g in ref["gemm_llama_tp8"] if g["model"] == "70b"]
    assert {(g["linear"], g["pass"]) for g in layer["gemms"]} == {(g["linear"], g["pass"]) for g in raw}
    assert len(layer["gemms"]) == 12  # 4 linears × forward, input gradient, weight gradient
    assert layer["gemm_measured_s"] == pytest.approx(sum(g["s"] for g in raw))
    att = next(a for a in ref["attention_long"] if a["name"] == "70b tp8")
    assert layer["attention_measured_s"] == pytest.approx(att["fwd_s"] + att["bwd_s"])
    assert layer["attention_predicted_s"] > 0


def test_a_model_the_file_did_not_measure_is_refused_by_name():
    with pytest.raises(ValueError, match="no tp-8 GEMMs for '8b'"):
        measured.llama_tp8_layer("8b")


def test_the_planners_charge_is_the_sustained_ceiling_never_faster_than_the_burst():
    layer = measured.llama_tp8_layer("405b", "h100-ib")
    assert all(g["sustained_s"] >= g["predicted_s"] for g in layer["gemms"])
    assert layer["gemm_sustained_s"] == pytest.approx(sum(g["sustained_s"] for g in layer["gemms"]))
