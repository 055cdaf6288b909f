"""Notebooks 06-08's claims (mgpukit/exercises/claims_06_10.py) find what they guard: each is run
on a planted table that holds and on one that breaks it (the test of the test)."""
from __future__ import annotations

from mgpukit.exercises import claims_06_10 as c


def _nb(name: str, text: str) -> dict:
    out = [{"output_type": "stream", "name": "stdout", "text": text}]
    return {"cells": [{"cell_type": "code", "id": "x", "metadata": {"tags": [f"claim:{name}"]},
                       "source": "", "outputs": out}]}


PREFETCH = """one 70B block: 0.86 B parameters; the bound F/β·(N−1)/N = 1,880 tokens (predicted)
tokens per micro-batch  forward ms  gather ms  gather hidden  tokens > bound
                   512         1.3        5.0          False           False
                 1,024         2.5        5.0          False           False
                 4,096        10.2        5.0           True            True
                16,384        40.8        5.0           True            True
"""


def test_the_prefetch_rule_claim_holds_and_breaks():
    assert c.the_prefetch_rule_is_the_comparison(_nb("prefetch-rule", PREFETCH)) is None
    broken = PREFETCH.replace("2.5        5.0          False", "2.5        5.0           True")
    assert "disagree" in c.the_prefetch_rule_is_the_comparison(_nb("prefetch-rule", broken))


OVERTAKE = """1.3b: h = 2,048, one layer's model states 768 MiB; the bound 96h/17 = 11,565 tokens
s·b tokens  activations MiB  model states MiB  overtaken  s·b > bound
     2,048              136               768      False        False
     8,192              544               768      False        False
    16,384            1,089               768       True         True
    65,536            4,356               768       True         True
"""


def test_the_overtake_rule_claim_holds_and_breaks():
    assert c.activations_overtake_model_states_past_the_bound(_nb("overtake", OVERTAKE)) is None
    one_side = OVERTAKE.replace("False        False", "True         True")
    assert "one side" in c.activations_overtake_model_states_past_the_bound(_nb("overtake", one_side))


def test_the_zero_by_hand_claim_reads_the_verdict():
    line = "ZeRO's step (reduce-scatter, shard step, all-gather) equals DDP's bit for bit: {}\n"
    assert c.zero_by_hand_is_ddp(_nb("by-hand", line.format(True))) is None
    assert c.zero_by_hand_is_ddp(_nb("by-hand", line.format(False)))


def test_the_tp_count_claim_compares_formula_and_cost_model():
    text = ("tp all-reduces per step, stage 0: 2 blocks × 4 × 4 micro-batches + 4 (embedding) = 36; the cost model: {}\n"
            "stage 1: 2 × 4 × 4 + 4 (output layer, backward) + 2 × 4 (vocabulary-parallel loss) = 44; the cost model: 44\n")
    assert c.tp_all_reduces_are_counted_by_the_picture(_nb("tp-count", text.format(36))) is None
    assert c.tp_all_reduces_are_counted_by_the_picture(_nb("tp-count", text.format(40)))


def test_the_mesh_claim_reads_every_axis():
    good = "".join(f"{a}: [[0, 1]]  the kit's groups: True\n" for a in ("tp", "dp", "pp"))
    assert c.the_mesh_by_hand_is_the_kits(_nb("mesh-by-hand", good)) is None
    assert c.the_mesh_by_hand_is_the_kits(_nb("mesh-by-hand", good.replace("True", "False", 1)))


GEMM = """H100: measured on an H100 (reference file)
    GEMM (m×k)·(k×n)  bf16 TFLOP/s H100  predicted  fp32 H100  predicted  bf16/fp32 H100  predicted
         512·512·512                 60        180       43.0       56.0           1.4×       3.2×
      4096·4096·4096                600        650       50.0       60.0          12.0×      10.8×
"""


def test_the_smallest_gemm_miss_claim_holds_and_breaks():
    assert c.the_kernel_model_misses_the_smallest_gemms_gain(_nb("gemm", GEMM)) is None
    assert c.size_decides_what_bf16_buys(_nb("gemm", GEMM)) is None
    close = GEMM.replace("1.4×       3.2×", "1.4×       2.6×")
    assert "smallest GEMM" in c.the_kernel_model_misses_the_smallest_gemms_gain(_nb("gemm", close))
