"""Exercises keep their answers in the library (`mgpukit.exercises`), not in the notebook: every
exercise cell of every notebook is parsed, and none may pass an expected value to `check` or
hold a literal equal to its exercise's expected value. `check` says right / wrong and why
without printing the answer first; each debugging exercise has one broken variant, one exact and
one legitimately off, and the reader names the bug's mechanism among four suspects, whose bytes
the run confirms (the broken row sends what its suspect sends, to the byte)."""
from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest

from mgpukit import exercises
from mgpukit.exercises import EXERCISES, check, debugging, expected_value, get_exercise, hint, reveal
from mgpukit.exercises.leaks import mechanism_leak, variant_table
from mgpukit.exercises.suspects import ANSWERS, SUSPECTS, suspects
from mgpukit.experiment import run
from mgpukit.strategies import registry

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def exercise_cells(path):
    """(cell source, [(name, call)]) for every code cell that calls `check(...)`."""
    out = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", getattr(n.func, "attr", None)) == "check"]
        if calls:
            out.append((src, calls))
    return out


def _literals(src):
    """Numbers (also in comments: '# e.g. 2 * 3 / 4 * 212_352') and string constants of a cell."""
    numbers = [float(x.replace("_", "")) for x in re.findall(r"(?<![\w.])\d[\d_]*(?:\.\d+)?(?:e-?\d+)?", src)]
    strings = [n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return numbers, strings


def _flat(value):
    return [x for v in value for x in _flat(v)] if isinstance(value, (list, tuple)) else [value]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_exercise_cell_holds_its_answer(path):
    cells = exercise_cells(path)
    for src, calls in cells:
        names = [c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)]
        numbers, _ = _literals(re.sub("|".join(re.escape(f'"{n}"') for n in names) or "^$", '""', src))
        _, strings = _literals(src)
        for call in calls:
            assert len(call.args) == 2 and not call.keywords, (
                f"{path.name}: `{ast.unparse(call)}` — an exercise cell passes only (name, answer); "
                "put the expected value, tolerance and hint in mgpukit/exercises/answers_*.py")
            name = call.args[0].value
            for want in _flat(expected_value(name)):
                if isinstance(want, str):
                    assert want not in strings, f"{path.name} {name}: the answer {want!r} is in the cell"
                    comments = [c for c in re.findall(r"#[^\n]*", src) if f'"{want}"' in c]
                    assert all(" or " in c for c in comments), \
                        f"{path.name} {name}: a comment names the answer {want!r} (not as one of the choices)"
                elif isinstance(want, (int, float)) and want not in (0, 1):
                    close = [x for x in numbers if math.isclose(x, want, rel_tol=1e-3)]
                    assert not close, f"{path.name} {name}: the cell holds {close[0]}, the answer"


def test_notebooks_00_to_04_each_have_a_predict_then_run_and_a_debugging_exercise():
    for nn in ("00", "01", "02", "03", "04"):
        path = next(p for p in NOTEBOOKS if p.name.startswith(nn))
        names = {c.args[0].value for _, calls in exercise_cells(path) for c in calls}
        assert f"{nn}.debug" in names and any(n.startswith(f"{nn}.predict-") for n in names), (path.name, names)
        assert names <= set(EXERCISES), names - set(EXERCISES)


def test_check_says_right_or_wrong_and_why_without_giving_the_answer(capsys):
    want = expected_value("00.ring-bytes")
    assert check("00.ring-bytes", None) is None
    out = capsys.readouterr().out
    assert f"{want:,.0f}" not in out and str(int(want)) not in out
    assert get_exercise("00.ring-bytes").hint not in out and "hint('00.ring-bytes')" in out   # no hint before a try
    hint("00.ring-bytes")
    assert get_exercise("00.ring-bytes").hint in capsys.readouterr().out
    assert check("00.ring-bytes", want) is True and "why" in capsys.readouterr().out
    assert check("00.ring-bytes", 2 * want) is False
    out = capsys.readouterr().out
    assert "too high, by 2×" in out and str(int(want)) not in out
    psi_bytes = 4 * 212_352
    assert check("00.ring-bytes", psi_bytes) is False  # a known slip gets its own sentence
    assert "one copy of the gradients" in capsys.readouterr().out
    assert check("00.missing-average", "GRAD_NORMS ") is True
    reveal("00.ring-bytes")
    assert str(int(want)) in capsys.readouterr().out
    # the old three-argument form still works for a notebook that keeps its expected value
    assert check("mine", 3.0, 3.0) is True and check("mine", 4.0, 3.0) is False


def test_every_expected_value_computes():
    for name in EXERCISES:
        assert expected_value(name) is not None


@pytest.mark.parametrize("name", ["00", "01", "02", "03", "04"])
def test_the_broken_mystery_variant_misses_parity_and_sends_what_its_suspect_sends(name, capsys):
    """One variant exact, one broken, one legitimately off (3 steps, as the notebook runs them);
    the broken row sends exactly the bytes of the suspect that is the answer, and the table with
    the suspects printed below it gives no suspect away (`leaks.mechanism_leak`)."""
    records = exercises.mystery_runs(name)
    broken = debugging.broken_label(name)
    ok = {label[-1]: r["parity"]["ok"] for label, r in records.items()}
    assert ok[broken] is False and sorted(ok.values()) == [False, False, True], ok
    rec = records[f"variant {broken}"]
    assert rec["comm"]["0"]["bytes_sent"] / len(rec["losses"]) == SUSPECTS[name][ANSWERS[name] - 1].sends()
    table = exercises.parity_report(records)
    suspects(name)
    assert mechanism_leak(f"{name}.debug", variant_table(table), [(0, table + capsys.readouterr().out)]) is None
    if name == "03":  # its reveal(): the broken int8 lands farther than int8's own rounding, every column
        fields, _ = debugging._compressed("dp-int8")   # the correct int8, checked as the quiz checks
        with debugging._registered({"mystery-03-int8": fields}):
            int8 = run("mystery-03-int8", workers=2, steps=3, mode="cpu")["parity"]
        assert all(records["variant C"]["parity"][k] > int8[k] for k in
                   ("losses_max_abs_diff", "grad_norms_max_abs_diff", "weights_max_abs_diff"))
    if name == "04":  # its reveal(): gradients m× too large (norm Δ = (m − 1)× the norm), losses as logged;
        # the summed loss: loss and gradient both m×, and under AdamW the very updates of the bug
        summed, bug, exact = records["variant A"], records["variant B"], records["variant C"]
        assert bug["grad_norms"][0] == pytest.approx(4 * exact["grad_norms"][0], rel=1e-4)
        assert bug["losses"][0] == pytest.approx(exact["losses"][0], rel=1e-6)
        assert summed["losses"][0] == pytest.approx(4 * exact["losses"][0], rel=1e-6)
        assert summed["grad_norms"] == bug["grad_norms"]
        assert summed["parity"]["weights_max_abs_diff"] == bug["parity"]["weights_max_abs_diff"]
    assert not any(s.name.startswith("mystery-") for s in registry.available())  # gone again


def test_00s_quiz_explanation_does_not_size_01s_bug():
    """Issue 35: 00.debug's explanation said skipping the token embedding leaves out 16 KiB — which was
    exactly 01's broken variant (Q5) and its never-synced size (Q6: 4,096 = 16 KiB / 4 B)."""
    from mgpukit.exercises import get_exercise as get
    from mgpukit.exercises.debugging import unsynced_numel
    from mgpukit.exercises.suspects import ANSWERS, SUSPECTS, _full
    gap = _full() - SUSPECTS["01"][ANSWERS["01"] - 1].sends()
    numel = unsynced_numel("01")
    assert gap == 4 * numel                                   # at n = 2 the ring factor is 1
    quiz = get("00.debug")
    said = " ".join([quiz.hint, quiz.why, *(text for _, text in quiz.mistakes)])
    for shown in (f"{gap / 1024:g} KiB", f"{gap:,}", f"{numel:,}", str(numel)):
        assert shown not in said, shown


def test_01_debug_feedback_does_not_give_q6_the_missing_tensors_size():
    """Issue 35: answering 01's debugging quiz (Q5) used to print the skipped tensor's shape and
    bytes (256 × 64, 64 KiB fewer), which is Q6's answer (its 16,384 values) in another unit."""
    from mgpukit.exercises import expected_value, get_exercise
    numel = int(expected_value("01.never-synced"))
    quiz = get_exercise("01.debug")
    said = " ".join([quiz.hint, quiz.why, *(text for _, text in quiz.mistakes)])
    for form in ("256 × 64", "64 × 256", f"{numel}", f"{numel:,}", f"{numel * 4 // 1024} KiB",
                 f"{numel * 4:,}"):
        assert form not in said, f"01.debug's feedback states {form!r}, which answers Q6"


def test_03_q4_refuses_the_bytes_only_ratio(capsys):
    """Issue 35: with rel = 0.1 the bytes-only tie 0.25 (which 03's explorer showed at its
    default) passed a question whose point is the α term; the α-aware ratio must pass."""
    from mgpukit.exercises import check, expected_value
    from mgpukit.exercises.answers_00_04 import _psi
    assert check("03.predict-topk-tie", 0.25) is False
    by_hand = 0.25 + 15e-6 * 1.1e9 / (8 * _psi())           # 8k + α·β = 2Ψ·2(n−1)/n + 2α, n = 2
    assert check("03.predict-topk-tie", by_hand) is True
    assert expected_value("03.predict-topk-tie") == pytest.approx(by_hand, rel=1e-3)


def test_feedback_gives_the_difference_when_the_ratio_rounds_to_one(capsys):
    """Issue 35: 11 Q2's answer 312 (313 expected) was told 'too low, by 1×'."""
    from mgpukit.exercises import check
    check("11.capacity", 312)
    out = capsys.readouterr().out
    assert "too low, by 1." in out and "1×" not in out, out
    check("03.predict-topk-tie", 0.125)
    assert "too low, by 2.08×" in capsys.readouterr().out
