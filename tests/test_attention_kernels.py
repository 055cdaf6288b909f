"""A run's attention kernel generation is charged at that kernel's measured rate (issue 37).

torch-FSDP bf16 runs on H100 from 2023 used FlashAttention-2, which reaches ~35 % of the H100's
bf16 peak where FlashAttention-3 / cuDNN reach ~60-75 % (Shah et al. 2024, arXiv:2407.08608,
Fig. 5-6); the H100 profiles' ``[attention]`` table is torch 2.11's SDPA of 2026. On the old code
every such run was charged the 2026 kernel (no ``Layout.attention_kernel``, no
``costmodel.attention_kernels``): these tests fail there.
"""
import subprocess
from dataclasses import replace
import sys

import pytest

from mgpukit.costmodel.attention_kernels import FA2_HOPPER, with_attention_kernel
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.kernels import attention_flops, attention_seconds
from mgpukit.costmodel.layout import Layout, LayoutError
from mgpukit.costmodel.shapes import get_shape
from mgpukit.costmodel.steptime import step_time
from mgpukit.costmodel.validation import attention_of, format_validation, runs

# FA2's bars in FA3's Fig. 5 (forward) / Fig. 6 (backward), H100 80GB SXM5, bf16, TFLOP/s. The first
# two (causal hd 128) were NOT used to set FA2_HOPPER (attention_kernels docstring): held out.
FA2_MEASURED = [  # (head dim, seq, causal, backward, TFLOP/s)
    (128, 2048, True, False, 298),
    (128, 8192, True, False, 333),
    (64, 8192, False, False, 322),
    (128, 8192, False, True, 318),
]


def _tflops(profile, hd, seq, *, causal, backward):
    bh = (16384 // seq) * (2048 // hd)  # FA3's benchmark: batch x seq = 16K, heads x head dim = 2,048
    t = attention_seconds(bh, seq, seq, hd, profile, causal=causal, backward=backward)
    return attention_flops(bh, seq, seq, hd, causal=causal, backward=backward) / t / 1e12


@pytest.mark.parametrize("name", ["h100-nvlink", "h100-ib", "h200"])
@pytest.mark.parametrize("hd, seq, causal, backward, measured", FA2_MEASURED)
def test_an_fa2_run_on_hopper_runs_at_fa2s_measured_rate(name, hd, seq, causal, backward, measured):
    fa2 = with_attention_kernel(load_profile(name), "fa2")
    assert fa2.attention == FA2_HOPPER
    assert _tflops(fa2, hd, seq, causal=causal, backward=backward) == pytest.approx(measured, rel=0.10)


def test_the_profiles_own_hopper_kernel_is_fa3_class_and_unchanged():
    hw = load_profile("h100-nvlink")
    assert with_attention_kernel(hw, "") is hw and with_attention_kernel(hw, "fa3") is hw
    # FA3 / cuDNN at hd 128, seq 8K causal: 529-602 TFLOP/s (FA3 Fig. 5); FA2 333: the two generations apart
    assert _tflops(hw, 128, 8192, causal=True, backward=False) > 1.5 * 333


def test_the_a100s_own_table_is_fa2_and_fa3_is_refused_there():
    a100 = load_profile("a100-nvlink")
    assert with_attention_kernel(a100, "fa2") is a100
    with pytest.raises(ValueError, match="Hopper"):
        with_attention_kernel(a100, "fa3")
    with pytest.raises(LayoutError):
        Layout(attention_kernel="fa1")


def test_an_fa2_runs_step_grows_with_the_sequence_against_the_2026_kernel():
    """Attention's share of a step grows with the sequence, so the FA2 run's extra time does too
    (issue 37: the error grew from 2K to 8K on 7B)."""
    hw, shape = load_profile("h100-nvlink"), get_shape("7b")
    ratios = []
    for seq in (2048, 8192):
        s = replace(shape, seq_len=seq)
        lay = Layout(dp=8, zero=3, micro_batch=1, num_micro_batches=8, checkpointing="full")
        fa2 = Layout(dp=8, zero=3, micro_batch=1, num_micro_batches=8, checkpointing="full", attention_kernel="fa2")
        t_fa2, t_own = (step_time(s, x, hw, framework="fsdp")["total_s"] for x in (fa2, lay))
        ratios.append(t_fa2 / t_own)
    assert 1.0 < ratios[0] < ratios[1]


def test_the_validation_table_says_which_kernel_each_row_is_charged():
    kernels = {r.name: attention_of(r) for r in runs()}
    assert all(k == "unfused" for n, k in kernels.items() if "A100" in n)  # Megatron's 2021 softmax
    assert [k for n, k in kernels.items() if "H100" in n] == ["fa3", "fa3"]  # Llama 3, 2024 kernels
    header, *rows = format_validation().splitlines()
    assert "attention" in header and all(kernels[r.name] in line for r, line in zip(runs(), rows))


def test_plan_refuses_fa3_on_an_a100_in_one_line():
    out = subprocess.run([sys.executable, "-m", "mgpukit.cli", "plan", "--model", "7b", "--profile", "a100-nvlink",
                          "--framework", "fsdp", "--zero", "3", "--attention-kernel", "fa3"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Hopper" in out.stderr
