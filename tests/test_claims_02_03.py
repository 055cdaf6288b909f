"""The claims of notebooks 02 and 03 (`mgpukit.exercises.claims_02_03`) fail when what they read
stops being true: each test feeds a claim the table the executed notebook printed (it passes) and
the same table with the one number that would make the markdown wrong (it fails)."""
from __future__ import annotations

from mgpukit.exercises import claims_02_03 as C
from mgpukit.exercises.claims import claim_problems


def _cell(tag, text):
    return {"cell_type": "code", "execution_count": 1, "id": tag, "metadata": {"tags": [f"claim:{tag}"]},
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}], "source": ""}


def _nb(*cells):
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


RULE = ("B* = n·α·β = 2.82 MiB on 4 × h100-nvlink; at B* the busbw is β/2 = 185 GB/s\n"
        "       bytes  B > B*  busbw / β   (emulated ring)\n"
        "       1,024   False      0.000\n"
        "      16,384   False      0.006\n"
        "     262,144   False      0.081\n"
        "   4,194,304    True      0.586\n"
        "  16,777,216    True      0.850\n")

EMULATED = (" algorithm latencies  busbw 1 KiB  busbw 16 MiB   GB/s (emulated, 4 × h100-nvlink)\n"
            "   backend         6        0.128         314.5\n"
            "      ring         6        0.128         314.5\n"
            " halv-doub         4        0.192         331.1\n"
            "     naive         4        0.192         132.9\n"
            "naive at 16 MiB (predicted): table's 2(n−1) messages 88.6 GB/s · emulator's 1 + (n−1) 132.9 GB/s\n")

ROUND = ("      run      round  server idle  worker idle  updates  their time   (emulated h100-nvlink)\n"
         "  ps-sync    7.57 ms       7.4 ms       179 µs        1      154 µs\n"
         " ps-async     7.4 ms      6.83 ms       307 µs        2      568 µs\n")

CHECKED = (" n  algorithm  == backend  bytes sent by rank 0  by rank 1  2(n-1)/n·B\n"
           " 2       ring        True                 4,004      4,004       4,004\n"
           " 2      naive        True                 4,004      4,004       4,004\n"
           " 2  halv-doub        True                 4,004      4,004       4,004\n"
           " 3       ring        True                 5,336      5,340       5,339\n"
           " 3      naive        True                 8,008      4,004       5,339\n"
           " 4       ring        True                 6,004      6,008       6,006\n"
           " 4      naive        True                12,012      4,004       6,006\n"
           " 4  halv-doub        True                 6,004      6,004       6,006\n")


def test_the_ring_rule_fails_when_a_row_is_on_the_wrong_side_of_beta_over_2():
    assert C.the_ring_is_bandwidth_bound_above_n_alpha_beta(_nb(_cell("rule", RULE))) is None
    latency_bound = RULE.replace("0.586", "0.414")   # B > B* but under β/2: the rule would be wrong
    assert "4,194,304" in C.the_ring_is_bandwidth_bound_above_n_alpha_beta(_nb(_cell("rule", latency_bound)))


def test_the_emulated_table_fails_off_the_ring_formula_and_on_contention():
    assert C.the_emulated_algorithms_land_on_their_formulas(_nb(_cell("emulated", EMULATED))) is None
    off = EMULATED.replace("      ring         6        0.128         314.5", "      ring         6        0.128         300.0")
    assert "ring" in C.the_emulated_algorithms_land_on_their_formulas(_nb(_cell("emulated", off)))
    serial = EMULATED.replace("     naive         4        0.192         132.9", "     naive         4        0.192          88.6")
    assert "emulator's formula" in C.the_emulated_algorithms_land_on_their_formulas(_nb(_cell("emulated", serial)))


def test_the_async_round_claim_fails_when_async_is_longer_or_runs_one_update():
    assert C.the_async_round_runs_twice_the_updates_and_is_shorter(_nb(_cell("ps-round", ROUND))) is None
    longer = ROUND.replace("     7.4 ms      6.83 ms", "    7.74 ms      6.83 ms")
    assert "not shorter" in C.the_async_round_runs_twice_the_updates_and_is_shorter(_nb(_cell("ps-round", longer)))
    once = ROUND.replace("        2      568 µs", "        1      568 µs")
    assert "not twice" in C.the_async_round_runs_twice_the_updates_and_is_shorter(_nb(_cell("ps-round", once)))


def test_the_check_table_fails_on_a_mismatch_and_a_byte_off():
    assert C.every_all_reduce_equals_the_backend(_nb(_cell("checked", CHECKED))) is None
    wrong = CHECKED.replace(" 3      naive        True", " 3      naive       False")
    assert "naive on 3 ranks differs" in C.every_all_reduce_equals_the_backend(_nb(_cell("checked", wrong)))
    off = CHECKED.replace("12,012      4,004", "12,012      8,008")
    assert "naive on 4 ranks sends" in C.every_all_reduce_equals_the_backend(_nb(_cell("checked", off)))


def test_02s_claims_say_which_cell_is_missing():
    found = claim_problems("02_communication", _nb())
    assert found and all("no cell is tagged" in p for p in found), found


RULE03 = ("method       bytes saved  T_own + Δα  β* GB/s  pays on 10 GbE  emulated ×\n"
          "dp-fp16          424,704    0.876 µs      485            True        1.21\n"
          "dp-int8          635,584    -8.48 µs      inf            True        1.36\n"
          "dp-topk          832,416    -11.4 µs      inf            True        1.53\n"
          "dp-powersgd      795,648      1.2 ms    0.663           False        0.82\n")

BYTES = ("method        bytes/step  expected ×  measured ×\n"
         "ddp              849,408        1.00        1.00\n"
         "dp-fp16          424,704        2.00        2.00\n"
         "dp-bf16          424,704        2.00        2.00\n"
         "dp-int8          213,824        3.98        3.97\n"
         "dp-topk           16,992       50.00       49.99\n"
         "dp-powersgd       53,760       15.80       15.80\n")

STEPS = ("method        NVLink step     ×  10 GbE step     ×   (emulated; × = speed-up vs ddp)\n"
         "ddp               1.42 ms  1.00      2.22 ms  1.00\n"
         "dp-fp16           1.42 ms  1.00      1.83 ms  1.21\n"
         "dp-int8           1.42 ms  1.00      1.63 ms  1.36\n"
         "dp-topk           1.42 ms  1.00      1.45 ms  1.53\n"
         "dp-powersgd       2.57 ms  0.55      2.69 ms  0.82\n")


def test_03s_rule_fails_when_the_emulator_disagrees_with_the_inequality():
    assert C.the_rule_says_who_pays_on_10_gbe(_nb(_cell("rule", RULE03))) is None
    # PowerSGD emulated faster on 10 GbE while the rule says it does not pay
    disagree = RULE03.replace("False        0.82", "False        1.05")
    assert "dp-powersgd" in C.the_rule_says_who_pays_on_10_gbe(_nb(_cell("rule", disagree)))
    one_verdict = RULE03.replace("False        0.82", " True        1.05").replace("0.663", "  inf")
    assert "one verdict" in C.the_rule_says_who_pays_on_10_gbe(_nb(_cell("rule", one_verdict)))


def test_03s_step_claim_fails_when_bytes_do_not_order_the_speed_ups():
    good = _nb(_cell("emulated-steps", STEPS), _cell("bytes", BYTES))
    assert C.fewer_bytes_win_only_on_the_slow_link(good) is None
    swapped = STEPS.replace("1.63 ms  1.36", "1.63 ms  1.60")     # int8 ahead of top-k, which saves more
    assert "follow the bytes" in C.fewer_bytes_win_only_on_the_slow_link(_nb(_cell("emulated-steps", swapped),
                                                                            _cell("bytes", BYTES)))
    nvlink_gain = STEPS.replace("1.42 ms  1.00      1.83", "1.20 ms  1.18      1.83")
    assert "dp-fp16 on NVLink" in C.fewer_bytes_win_only_on_the_slow_link(_nb(_cell("emulated-steps", nvlink_gain),
                                                                             _cell("bytes", BYTES)))


def test_03s_residual_by_hand_fails_without_the_residual():
    steps = [[0, 1], [0, 2], [0, 1], [2, 3], [0, 1], [2, 4], [0, 1], [3, 5], [0, 2], [1, 6]]
    with_ef = "".join(f"step {i}: sent coordinates {s}\n" for i, s in enumerate(steps))
    assert C.the_residual_by_hand_is_the_kits_top_k(_nb(_cell("ef-by-hand", with_ef))) is None
    no_ef = "".join(f"step {i}: sent coordinates [0, 1]\n" for i in range(10))   # acc = g every step
    assert "the kit's TopK" in C.the_residual_by_hand_is_the_kits_top_k(_nb(_cell("ef-by-hand", no_ef)))
