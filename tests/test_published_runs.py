"""The planner against published training runs: Megatron-LM Table 1 (Narayanan et al. 2021).

One calibrated model for every row (the ``[gemm]`` table of ``a100-nvlink``: two constants,
fitted once on the whole table), no per-row factor. Run with ``-s`` to see the table.
"""

import pytest

from mgpukit.costmodel import published
from mgpukit.costmodel.flops import megatron_flops


@pytest.fixture(scope="module")
def rows():
    out = published.published_table("a100-nvlink")
    print("\nMegatron-LM Table 1 (achieved TFLOP/s per GPU, Megatron's FLOP count), published vs predicted")
    print(published.format_table(out))
    return out


def test_every_row_within_10_percent(rows):
    assert len(rows) == 10
    bad = [(r["run"].params_b, f"{r['error']:+.1%}") for r in rows if abs(r["error"]) > 0.10]
    assert not bad, f"rows off by more than 10%: {bad}"


def test_the_table_is_transcribed_consistently():
    """Per-GPU TFLOP/s × GPUs matches the aggregate column; % of peak matches 312 TFLOP/s;
    tp · pp divides the GPUs and pp the layers; the paper's parameter count gives the size."""
    for run, agg in zip(published.MEGATRON_TABLE_1, published.AGGREGATE_PFLOPS):
        assert run.tflops_per_gpu * run.gpus / 1e3 == pytest.approx(agg, rel=0.006)
        assert run.tflops_per_gpu / 312 == pytest.approx(run.percent_peak / 100, abs=0.006)
        assert run.gpus % (run.tp * run.pp) == 0 and run.layers % run.pp == 0
        h, l = run.hidden, run.layers
        params = 12 * l * h * h * (1 + 13 / (12 * h) + (published.VOCAB + published.SEQ_LEN) / (12 * l * h))
        # the paper's §5.1 count: exact (0.3%) from 7.5B up; 3% and 1% under for 1.7B and 3.6B
        assert params / 1e9 == pytest.approx(run.params_b, rel=0.03)


def test_prediction_uses_megatrons_flop_count(rows):
    r = rows[-1]
    run, t = r["run"], r["time"]
    flops = megatron_flops(published.megatron_shape(run), run.batch, full_recompute=True)
    assert r["predicted_tflops"] == pytest.approx(flops / t["total_s"] / run.gpus / 1e12)
    assert r["layout"].world_size == run.gpus and r["layout"].global_batch == run.batch


def test_the_trend_is_the_papers(rows):
    """Bigger models use the GPUs better (larger GEMMs per tp rank, smaller s/6h attention
    share): the 1T model's prediction beats the 3.6B's, as published (163 vs 138)."""
    assert rows[-1]["predicted_tflops"] > rows[1]["predicted_tflops"]


def test_the_validation_table_within_10_percent_per_row_except_its_stated_gaps(capsys):
    """Megatron-LM Table 1, BLOOM 176B, MT-NLG 530B x3, Llama 3 405B x2 (mgpukit.costmodel.validation):
    each row within ±10 % unless listed in KNOWN_GAPS with what is missing — and a listed row must
    still be outside, so a fix that brings it in has to move it back into the check."""
    from mgpukit.costmodel import validation

    rows = validation.validation_table()
    print("\n" + validation.format_validation(rows))
    assert len(rows) == 16
    for r in rows:
        name = r["run"].name
        if name in validation.KNOWN_GAPS:
            assert abs(r["error"]) > validation.CHECK, f"{name} is now within the check: remove it from KNOWN_GAPS"
        else:
            assert abs(r["error"]) <= validation.CHECK, (name, f"{r['error']:+.1%}")
    # BLOOM is not fitted on (deepspeed-pipe's kernel efficiency is fitted on MT-NLG's three rows)
    bloom = next(r for r in rows if r["run"].name.startswith("BLOOM"))
    assert abs(bloom["error"]) <= validation.CHECK


def test_the_h100_rows_use_the_burst_gemm_rate_of_the_h200_it_was_fitted_on():
    """The H100 SXM and the H200 are one GH100 die at one 700 W, and their measured matmul ceilings
    agree (Bekman's MAMF table: H100 SXM 80.3 % of peak, "H200 is the same"; the H200 fit's best
    shape 81.1 %; the H100 measured 2026-11-26: 8192^3 at 798 TFLOP/s = 80.6 %): every H100 SXM
    profile carries the H200's burst GEMM table unchanged. What the H100 measured beyond it is
    stated separately — the sustained-power ceiling and attention by shape — so a rate tuned on
    the H100 profiles alone (e.g. to pull the Llama 3 rows inside ±10 %) fails here."""
    from dataclasses import replace

    from mgpukit.costmodel import validation
    from mgpukit.costmodel.hardware import load_profile

    h200 = load_profile("h200")
    profiles = {r["run"].profile for r in validation.validation_table() if "H100" in r["run"].name}
    assert profiles == {"h100-ib"}
    for name in ("h100-ib", "h100-nvlink"):
        p = load_profile(name)
        assert replace(p.gemm, sustained=0.0) == h200.gemm and p.peak_flops == h200.peak_flops, name
        assert p.gemm.sustained == 0.695 and p.attention.by_shape, name
