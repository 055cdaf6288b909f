"""Notebook 05's sentences, held true here instead of by `assert`s in its teaching cells (issue 35),
and its rule — tensor parallelism over a link of bus bandwidth β pays when h > B·F / (9β) —
checked against the cost model the emulator runs (`lessons.tensor_parallel.tp_rule_rows`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import mgpukit
from mgpukit.exercises import expected_value
from mgpukit.lessons import get_shape, measured
from mgpukit.lessons import tensor_parallel as tpl

ROOT = Path(__file__).resolve().parents[1]


def test_the_rule_agrees_with_the_cost_model_for_every_shipped_width():
    """h > B·F/(9β) says "pays" exactly where tp = 2 predicts a shorter step than tp = 1, for
    1.3B-70B on NVLink, PCIe and InfiniBand (bf16) — and the thresholds order by link speed."""
    rows = tpl.tp_rule_rows(models=("1.3b", "7b", "13b", "70b"), dtype="bf16")
    assert all(r["rule_pays"] == (r["ratio"] < 1) for r in rows), rows
    assert {r["rule_pays"] for r in rows} == {True, False}  # both sides of the threshold are exercised
    nv, pcie = (tpl.tp_threshold(link) for link in list(tpl.LINKS)[:2])
    assert nv < 2048 < pcie


def test_tiny_never_pays_on_either_side():
    """05 §6: gpt-tiny at tp 2 and 4 is slower than tp 1 on both links, predicted and emulated."""
    links = list(tpl.LINKS)[:2]
    single = {link: tpl.predicted_tp_step("gpt-tiny", 1, link)["total_s"] for link in links}
    assert all(tpl.predicted_tp_step("gpt-tiny", t, link)["total_s"] > single[link] for t in (2, 4) for link in links)
    one = tpl.emulated_run(1, links[0])
    assert all(tpl.steady_step(rec) > tpl.steady_step(one) for rec in tpl.emulated_steps(tps=(2,)))


def test_with_launches_the_links_meet_and_the_cost_model_is_short():
    """05 §6: with launches the step is the same on both links (the host hides the link), and the
    cost model is 2-15 % short of the clock (the vocabulary-split loss's small ops it does not count)."""
    launched = [tpl.emulated_run(2, link, kernels_only=False) for link in list(tpl.LINKS)[:2]]
    nv, pcie = (tpl.steady_step(r) for r in launched)
    assert abs(nv / pcie - 1) < 0.05
    ratios = [tpl.predicted_tp_step("gpt-tiny", 2, r["link"], kernels_only=False)["total_s"] / tpl.steady_step(r)
              for r in launched]
    assert all(0.85 <= x < 0.98 for x in ratios), ratios


@pytest.fixture(scope="module")
def runs():
    return {name: mgpukit.run(name, workers=2, steps=3) for name in ("tp", "tp-sp", "tp-native")}


def test_tp_native_counts_4L_plus_2_and_sp_saves_layernorm_memory(runs):
    """05 §4: tp-native's recorder sees 4L + 2 all-reduces a step; §5: SP halves the LayerNorm
    activations and saves less on the whole model."""
    steps = len(runs["tp"]["losses"])
    assert runs["tp-native"]["comm"]["0"]["collectives"]["all_reduce"] / steps == 4 * get_shape("gpt-tiny").n_layer + 2
    ln = tpl.sequence_parallel_memory(t=2)
    whole = [runs[n]["memory"]["0"]["activations"] for n in ("tp", "tp-sp")]
    assert ln["tp-sp"] < ln["tp"] and whole[1] / whole[0] > ln["tp-sp"] / ln["tp"]


def test_the_70b_shard_is_the_whole_gemm_split_8_ways():
    full = next(g for g in measured.gemm_rows("h100-nvlink") if (g["m"], g["n"], g["k"], g["dtype"]) == (8192, 8192, 8192, "bf16"))
    shard = next(g for g in measured.llama_tp8_layer("70b", "h100-nvlink")["gemms"] if (g["linear"], g["pass"]) == ("o", "fwd"))
    assert shard["k"] * 8 == full["k"] and (shard["m"], shard["n"]) == (full["m"], full["n"])
    assert full["measured_s"] / shard["measured_s"] > 4
    tiny = get_shape("gpt-tiny")
    fc1 = {t: measured.predicted_gemm(8 * tiny.seq_len, tiny.d_ff // t, tiny.d_model, dtype="fp32") for t in (1, 2)}
    assert fc1[2] > 0.9 * fc1[1]


def test_q1_asks_what_the_picture_shows():
    """Issue 35: 05's first question counts the blocks' f and g (4 per block), which the picture
    draws; the embedding, head and loss collectives are section 4's table."""
    assert expected_value("05.tp-all-reduces") == 4 * get_shape("gpt-tiny").n_layer


def test_notebook_05_teaching_cells_are_short_and_assert_free():
    nb = json.loads((ROOT / "notebooks" / "05_tensor_parallel.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(len(src.splitlines()) <= 12 for src in code)
    assert not [src for src in code if "assert " in src]
    questions = [m for src in code for m in re.findall(r"^# (Q\d+)", src, flags=re.M)]
    assert questions == ["Q1", "Q2", "Q3"]
