"""Pipeline schedules (pure data), the schedule simulator, and agreement with PyTorch.

Method: small tables are written out by hand; bubble fractions come from the discrete-event
simulator with equal stage costs (F = 1, B = 2, I = W = 1) and are compared with the closed
forms; agreement with ``torch.distributed.pipelining`` compares compute actions per rank, in
order (see ``test_matches_pytorch``).
"""

from fractions import Fraction

import pytest

from mgpukit.costmodel.schedules import (
    Action, build_schedule, check_table, describe, max_in_flight, to_rows)
from mgpukit.costmodel.simulate import DeadlockError, bubble_formula, simulate
from mgpukit.strategies.pipeline.torch_order import torch_order


def _parse(row: str, stage=None) -> list[Action]:
    """'F0 B0' -> actions on stage ``stage``; 'F0.1' = micro-batch 0, global stage 1."""
    out = []
    for tok in row.split():
        kind, rest = tok[0], tok[1:]
        mb, _, s = rest.partition(".")
        out.append(Action(kind, int(mb), int(s) if s else stage))
    return out


# ------------------------------------------------------------------ exact small tables


def test_gpipe_p2_m2_by_hand():
    assert build_schedule("gpipe", 2, 2) == [_parse("F0 F1 B0 B1", 0), _parse("F0 F1 B0 B1", 1)]


def test_1f1b_p2_m3_by_hand():
    assert build_schedule("1f1b", 2, 3) == [_parse("F0 F1 B0 F2 B1 B2", 0),
                                            _parse("F0 B0 F1 B1 F2 B2", 1)]


def test_naive_p2_m2_by_hand():
    assert build_schedule("naive", 2, 2) == [_parse("F0 B0 F1 B1", 0), _parse("F0 B0 F1 B1", 1)]


def test_zb_h1_p2_m2_by_hand():
    # the last rank postpones W by p-1 = 1 step; rank 0 runs each W right after its I
    assert build_schedule("zb-h1", 2, 2) == [_parse("F0 F1 I0 W0 I1 W1", 0),
                                             _parse("F0 I0 F1 I1 W0 W1", 1)]


def test_interleaved_p2_m2_v2_by_hand():
    # rank 0 holds stages 0 and 2, rank 1 stages 1 and 3
    assert build_schedule("interleaved", 2, 2, v=2) == [
        _parse("F0.0 F1.0 F0.2 F1.2 B0.2 B1.2 B0.0 B1.0"),
        _parse("F0.1 F1.1 F0.3 B0.3 F1.3 B1.3 B0.1 B1.1"),
    ]


def test_describe_and_rows():
    table = build_schedule("1f1b", 2, 3)
    assert to_rows(table) == [["F0", "F1", "B0", "F2", "B1", "B2"],
                              ["F0", "B0", "F1", "B1", "F2", "B2"]]
    # one slot per action on the aligned grid; "." is idle
    assert describe(table).splitlines() == ["rank 0 | F0 F1 .  B0 F2 B1 .  B2",
                                            "rank 1 | .  F0 B0 F1 B1 F2 B2 ."]
    assert to_rows(build_schedule("interleaved", 2, 2, v=2))[0][2] == "F0.1"  # chunk 1


# ------------------------------------------------------------------ structure


CASES = [(name, p, m, 1) for name in ("naive", "gpipe", "1f1b", "zb-h1")
         for p in (1, 2, 3, 4) for m in (1, 2, 3, 5, 8)]
CASES += [("interleaved", p, m, v) for p in (1, 2, 3, 4) for m in (p, 2 * p, 3 * p)
          for v in (1, 2, 3)]


@pytest.mark.parametrize("name,p,m,v", CASES)
def test_each_microbatch_once_per_stage_and_runs(name, p, m, v):
    table = build_schedule(name, p, m, v)
    assert len(table) == p
    check_table(table, m)  # one F and one B (or I + W) per (stage, micro-batch)
    for r, ops in enumerate(table):
        assert all(a.stage % p == r for a in ops)  # stage s lives on rank s % p
    simulate(table)  # dependency-valid: no deadlock


@pytest.mark.parametrize("p,m", [(2, 3), (4, 4), (4, 8), (3, 7)])
def test_activations_in_flight(p, m):
    for r in range(p):
        assert max_in_flight(build_schedule("gpipe", p, m), r) == m
        assert max_in_flight(build_schedule("1f1b", p, m), r) == min(p - r, m)
        assert max_in_flight(build_schedule("naive", p, m), r) == 1
    # zb-h1: F done but W not yet (the memory a W still needs) peaks at p, 1F1B's peak
    for r, ops in enumerate(build_schedule("zb-h1", p, m)):
        live, peak = set(), 0
        for a in ops:
            if a.kind == "F":
                live.add(a.microbatch)
            elif a.kind == "W":
                live.discard(a.microbatch)
            peak = max(peak, len(live))
        assert peak <= min(p, m)


def test_bad_inputs_say_what_to_change():
    with pytest.raises(ValueError, match="choose one of"):
        build_schedule("pipedream", 2, 2)
    with pytest.raises(ValueError, match="use m >= 1"):
        build_schedule("gpipe", 2, 0)
    with pytest.raises(ValueError, match="use m=4 or m=8"):
        build_schedule("interleaved", 4, 6, v=2)
    with pytest.raises(ValueError, match="only used by 'interleaved'"):
        build_schedule("1f1b", 4, 8, v=2)


# ------------------------------------------------------------------ simulator


@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (2, 4), (3, 5), (4, 4), (4, 8), (4, 16),
                                 (8, 3), (8, 32)])
def test_bubble_gpipe_1f1b_naive_exact(p, m):
    for name in ("gpipe", "1f1b"):
        assert simulate(build_schedule(name, p, m)).bubble_fraction == (p - 1) / (m + p - 1)
    assert simulate(build_schedule("naive", p, m)).bubble_fraction == (p - 1) / p


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 6, 3), (4, 4, 2), (4, 8, 2), (4, 8, 4),
                                   (4, 16, 3), (3, 9, 2), (4, 8, 1)])
def test_bubble_interleaved(p, m, v):
    # cost convention: each of the v chunks costs 1/v of a rank's full stage
    tl = simulate(build_schedule("interleaved", p, m, v))
    assert tl.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-12)
    assert tl.makespan == pytest.approx(3 * m + 3 * (p - 1) / v, rel=1e-12)


@pytest.mark.parametrize("p,m", [(2, 2), (2, 5), (3, 6), (4, 4), (4, 8), (4, 16), (8, 16)])
def test_bubble_zb_h1_is_a_third_of_1f1b(p, m):
    """Qi et al. 2023: with T_F = T_I = T_W, ZB-H1's bubble is (p-1)(T_F+T_I-T_W) per rank,
    a third of 1F1B's (p-1)(T_F+T_I+T_W). cost_b = 2 splits into I = W = 1, F = 1."""
    zb, ofob = simulate(build_schedule("zb-h1", p, m)), simulate(build_schedule("1f1b", p, m))
    assert sum(zb.idle) / p == p - 1 and sum(ofob.idle) / p == 3 * (p - 1)
    assert zb.bubble_fraction == (p - 1) / (3 * m + p - 1) == bubble_formula("zb-h1", p, m)


def test_zb_h1_p4_m8_figure():
    # p=4, m=8: makespan 27 vs 1F1B's 33; bubble 1/9 = 0.111 vs 3/11 = 0.273
    zb, ofob = simulate(build_schedule("zb-h1", 4, 8)), simulate(build_schedule("1f1b", 4, 8))
    assert (zb.makespan, ofob.makespan) == (27, 33)
    assert Fraction(zb.bubble_fraction).limit_denominator(100) == Fraction(1, 9)
    assert Fraction(ofob.bubble_fraction).limit_denominator(100) == Fraction(3, 11)


def test_timeline_records_and_p2p_cost():
    tl = simulate(build_schedule("gpipe", 2, 1), cost_p2p=0.5)
    assert tl.events == [
        {"rank": 0, "stream": "compute", "kind": "fwd", "microbatch": 0, "stage": 0,
         "start": 0.0, "end": 1.0},
        {"rank": 1, "stream": "compute", "kind": "fwd", "microbatch": 0, "stage": 1,
         "start": 1.5, "end": 2.5},
        {"rank": 1, "stream": "compute", "kind": "bwd", "microbatch": 0, "stage": 1,
         "start": 2.5, "end": 4.5},
        {"rank": 0, "stream": "compute", "kind": "bwd", "microbatch": 0, "stage": 0,
         "start": 5.0, "end": 7.0},
    ]
    assert tl.makespan == 7.0 and tl.busy == [3.0, 3.0] and tl.idle == [4.0, 4.0]
    zb = simulate(build_schedule("zb-h1", 2, 2), cost_w=0.5)  # I = cost_b - W = 1.5
    assert {e["kind"] for e in zb.events} == {"fwd", "bwd_input", "bwd_weight"}
    (w0, w1), (i0, i1) = zb.span(Action("W", 0, 1)), zb.span(Action("I", 0, 1))
    assert (w1 - w0, i1 - i0) == (0.5, 1.5)


def test_deadlock_names_the_stuck_actions():
    # rank 1 wants micro-batch 1 first, rank 0 wants its backward of micro-batch 0 first
    table = [_parse("F0 B0 F1 B1", 0), _parse("F1 F0 B0 B1", 1)]
    with pytest.raises(DeadlockError, match=r"rank 0 is stuck at B0 of stage 0.*"
                                            r"rank 1 is stuck at F1 of stage 1"):
        simulate(table)
    with pytest.raises(DeadlockError, match="no rank runs it"):
        simulate([_parse("F0 B0", 0), _parse("F0", 1)])
    with pytest.raises(ValueError, match="appears twice"):
        simulate([_parse("F0 F0 B0", 0)])


# ------------------------------------------------------------------ PyTorch agreement


TORCH_CASES = [("gpipe", p, m, 1) for p in (1, 2, 3, 4) for m in (1, 3, 4, 8)]
TORCH_CASES += [("1f1b", p, m, 1) for p in (1, 2, 3, 4) for m in (p, p + 1, 2 * p, 8)]
TORCH_CASES += [("interleaved", p, m, v) for p in (2, 3, 4) for m in (p, 2 * p, 3 * p)
                for v in (1, 2, 3, 4)]
TORCH_CASES += [("zb-h1", p, m, 1) for p in (2, 3, 4) for m in (p, 2 * p, 3 * p)]


@pytest.mark.parametrize("name,p,m,v", TORCH_CASES)
def test_matches_pytorch(name, p, m, v):
    """Our table equals PyTorch's order exactly: compute actions (F/B/I/W with micro-batch and
    global stage) per rank, in order, ignoring send/recv, REDUCE_GRAD and idle (None) slots.

    PyTorch's order comes from ``torch_order``: for ScheduleGPipe / Schedule1F1B by running
    their ``_step_microbatches`` with a recording stand-in stage (their ``pipeline_order``
    picture mislabels 1F1B's last rank in torch 2.13); for ScheduleInterleaved1F1B and
    ScheduleInterleavedZeroBubble (one stage per rank = ZB-H1) from ``pipeline_order``, the IR
    their runtime executes. Interleaved with v=1 follows PyTorch: warm-up 2(p-1-r), not 1F1B's.
    """
    assert torch_order(name, p, m, v) == build_schedule(name, p, m, v)
