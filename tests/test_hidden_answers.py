"""Hidden answers (issue 27): no exercise's answer is on screen before its check cell, no
debugging quiz can be answered from its printed table alone (a quiz asks for the bug's mechanism
among listed suspects; a row letter that the largest Δ of a column names is a leak), and every
notebook tells the reader about `reveal()`.

`mgpukit.exercises.leaks.find_leaks` reads an executed notebook as a reader does;
`notebooks/conftest.py` runs it on every notebook nbmake executes. These tests plant leaks in
small notebooks with outputs and check that it finds each one and nothing else (the test of the
test), then run nbmake itself on a planted leak to see the hook fail it."""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mgpukit.exercises import EXERCISES, expected_value, get_exercise, registry, suspects
from mgpukit.exercises.leaks import find_leaks, gives, largest_somewhere, numbers, singled_out, stands_out, variant_table
from mgpukit.exercises.suspects import ANSWERS, SUSPECTS, Suspect

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _md(text):
    return {"cell_type": "markdown", "id": f"m{abs(hash(text)) % 10**8}", "metadata": {}, "source": text}


def _code(src, *printed, fig=None):
    outputs = [{"output_type": "stream", "name": "stdout", "text": t} for t in printed]
    if fig is not None:
        outputs.append({"output_type": "display_data", "metadata": {},
                        "data": {"application/vnd.plotly.v1+json": fig, "text/plain": "Figure"}})
    return {"cell_type": "code", "execution_count": 1, "id": f"c{abs(hash(src)) % 10**8}", "metadata": {},
            "outputs": outputs, "source": src}


def _nb(*cells):
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _check(name):
    return _code(f'answer = None\ncheck("{name}", answer)', f"[{name}] not answered yet")


GROWTH = "00.bytes-growth"  # 2(n-1)/n at 16 over at 2 = 1.875


def test_numbers_are_read_with_the_precision_they_are_shown_with():
    got = {s.raw: (s.value, s.half_ulp, s.sig_digits) for s in numbers("1,274,112 B · 1.750× · 3.2e-01 · 27.3 % · 3/19")}
    assert got["1,274,112"] == (1274112.0, 0.5, 7)
    assert got["1.750"] == (1.75, 0.0005, 4)
    assert got["3.2e-01"][0] == pytest.approx(0.32)
    assert [s.value for s in numbers("27.3 %")] == [pytest.approx(0.273)]
    assert numbers("3/19")[0].value == pytest.approx(3 / 19)


def test_a_number_glued_to_a_unit_is_not_cut_short():
    """"Megatron-LM 18.4B" (notebook 09's validation table) once read as "18", which gave away
    09.rule-7b's 17.6 at two digits; a number glued to a word is not read, whole or cut."""
    assert [s.raw for s in numbers("Megatron-LM 18.4B, 256 A100")] == ["256"]
    assert [s.raw for s in numbers("18.4 B · 3.5")] == ["18.4", "3.5"]


@pytest.mark.parametrize("shown, leaks", [
    ("1.750", True), ("1.75", True), ("1.8", False),   # 1.8 rounds 1.75 but is 3 % off: not an answer
    ("2", False),                                       # one significant digit: too common to count
    ("1.749", False), ("175 %", True), ("1750", False),  # a percentage gives it, a bare 1750 does not
    ("1750 m", True), ("0.00175 k", True), ("1,750 bytes", False),  # a prefixed unit: any power of 1000
])
def test_a_shown_number_gives_the_answer_only_at_its_precision(shown, leaks):
    assert any(gives(s, 1.75, 1e-3) for s in numbers(shown)) is leaks


def test_an_answer_printed_above_its_check_is_a_leak_and_below_it_is_not():
    want = expected_value(GROWTH)
    table = f"each rank sends {want:.3f} × what it sends at n = 2"
    leaky = _nb(_code("print(table)", table), _md("**Q3.** from 2 to 16 ranks?"), _check(GROWTH))
    (leak,) = find_leaks(leaky)
    assert GROWTH in leak and f"'{want:.3f}'" in leak and "cell 0" in leak
    after = _nb(_md("**Q3.** from 2 to 16 ranks?"), _check(GROWTH), _code("print(table)", table))
    assert find_leaks(after) == []
    in_prose = _nb(_md(f"The bytes grow by {want:.4g}× from 2 to 16 ranks."), _check(GROWTH))
    assert len(find_leaks(in_prose)) == 1
    in_hint = _nb(_code(f'check("{GROWTH}", None)', f"hint: the answer is {want:.3g}"))
    assert len(find_leaks(in_hint)) == 1
    rounded_away = _nb(_md(f"about {want:.1f}×"), _check(GROWTH))   # 1.9: within its digit, 1.3 % off
    assert find_leaks(rounded_away) == []


def test_a_wall_clock_cell_is_not_read_for_numbers_but_an_untagged_one_is():
    want = expected_value(GROWTH)
    timed = _code("print(measured)", f"rank 1's rows went ×{want:.3f}, its time ×1.31")
    assert len(find_leaks(_nb(timed, _check(GROWTH)))) == 1
    timed["metadata"] = {"tags": ["wall-clock"]}
    assert find_leaks(_nb(timed, _check(GROWTH))) == []


def test_a_figure_title_or_bar_label_leaks_its_raw_coordinates_do_not():
    want = expected_value("04.gpipe-bubble")  # 7/31 = 0.226
    labelled = {"data": [{"type": "bar", "x": [1], "y": [want], "text": [f"{want:.3f}"]}], "layout": {}}
    titled = {"data": [{"type": "bar", "x": [1], "y": [want]}],
              "layout": {"title": {"text": f"bubble {want:.1%}"}}}
    silent = {"data": [{"type": "bar", "x": [1], "y": [want]}], "layout": {"title": {"text": "bubble"}}}
    for fig, leaks in ((labelled, 1), (titled, 1), (silent, 0)):
        assert len(find_leaks(_nb(_code("fig.show()", fig=fig), _check("04.gpipe-bubble")))) == leaks


def test_a_point_at_the_questions_own_parameter_leaks_on_hover():
    """Notebook 04 drew the 1F1B closed form at every m = 1…16: hovering m = 12 gave Q4's 0.2,
    though no label showed it; 02 drew the ring's predicted busbw on 60 sizes, one at 1.02 MiB
    within 9.4's tolerance. A point at the question's parameter (in its unit) leaks; the same curve
    drawn only where the runs are does not, nor does a point at another x."""
    want = expected_value("04.predict-1f1b")  # p = 4, m = 12: 3/15
    question = _md("**Q4.** 1F1B on p = 4 equal stages, **m = 12** micro-batches: what bubble fraction?")

    def line(ms):
        return {"data": [{"type": "scatter", "mode": "lines", "x": ms, "y": [3 / (m + 3) for m in ms]}],
                "layout": {"title": {"text": "1F1B bubble vs micro-batches"}}}
    (leak,) = find_leaks(_nb(_code("fig.show()", fig=line(list(range(1, 17)))), question, _check("04.predict-1f1b")))
    assert "hover" in leak and "(12, 0.2)" in leak
    assert find_leaks(_nb(_code("fig.show()", fig=line([1, 2, 4, 8, 16])), question, _check("04.predict-1f1b"))) == []
    shifted = {"data": [{"type": "scatter", "x": [13], "y": [want]}], "layout": {}}
    assert find_leaks(_nb(_code("fig.show()", fig=shifted), question, _check("04.predict-1f1b"))) == []
    # a prefixed unit in the question reaches the axis's unit, and plotly's typed arrays are read
    busbw = expected_value("02.predict-busbw")   # GB/s
    typed = {"data": [{"type": "scatter", "mode": "lines",
                       "x": {"dtype": "f8", "bdata": base64.b64encode(np.array([1.02 * 2**20]).tobytes()).decode()},
                       "y": [busbw * 0.985]}], "layout": {}}
    q94 = _md("**9.4** What bus bandwidth (GB/s) will the ring reach for a **1 MiB** all-reduce on **4** GPUs?")
    assert len(find_leaks(_nb(_code("fig.show()", fig=typed), q94, _check("02.predict-busbw")))) == 1


def test_a_list_answer_leaks_when_its_informative_elements_show_and_givens_do_not_count():
    gpipe, one_f_one_b = expected_value("04.in-flight")  # p = 4, m = 16: [16, 4]
    question = _md("**Q2.** p = 4, m = 16: how many micro-batches does rank 0 hold?")
    assert find_leaks(_nb(_code("", "m = 16, 16 micro-batches"), question, _check("04.in-flight"))) == []
    ps = expected_value("02.param-server")  # [worker 3, version 8, 32,000,000 bytes]
    shown = _code("", f"server link: {ps[-1]:,} bytes per step")
    assert len(find_leaks(_nb(shown, _md("**9.3**"), _check("02.param-server")))) == 1


def _table(rows):
    header = f"{'':10} {'parity':>7} {'losses Δ':>10} {'grad norms Δ':>13} {'weights Δ':>10} {'sent':>12}"
    return "\n".join([header] + [f"variant {k}  {r}" for k, r in rows.items()])


def _quiz(rows, name, *shown):
    return _nb(_code("print(parity_report(mystery))", _table(rows), *shown), _md("Which one?"), _check(name))


@pytest.fixture
def letter_quiz():
    """An old-style quiz whose answer is a row letter ("B"), registered while a test runs."""
    registry.add("99.debug", lambda: "B")
    yield "99.debug"
    registry.EXERCISES.pop("99.debug")


# round 5's quiz tables, as notebooks 00–03 printed them, relabelled so that the bug is row B:
# the decoy is farther in losses and gradient norms, yet the bug's weights drifted farthest
ROUND5 = {
    "00": {"A": "True 1.2e-07 2.8e-08 1.5e-08 849,408 B", "B": "False 2.6e-06 3.5e-05 1.0e-03 844,800 B",
           "C": "False 1.6e-05 1.4e-04 5.5e-05 424,704 B"},
    "01": {"A": "False 2.5e-02 2.8e-01 4.0e-03 16,992 B", "B": "False 1.1e-04 8.0e-03 1.2e-02 833,024 B",
           "C": "True 1.2e-07 2.8e-08 1.5e-08 849,408 B"},
    "02": {"A": "True 1.2e-07 2.8e-08 1.5e-08 849,408 B", "B": "False 5.1e-03 1.6e-01 1.8e-02 424,704 B",
           "C": "False 2.5e-02 2.8e-01 4.0e-03 16,992 B"},
    "03": {"A": "False 2.5e-02 2.8e-01 4.0e-03 16,992 B", "B": "False 7.2e-04 6.4e-02 5.7e-03 212,992 B",
           "C": "True 1.2e-07 2.8e-08 1.5e-08 849,408 B"},
}


@pytest.mark.parametrize("nn", sorted(ROUND5))
def test_a_letter_quiz_whose_bug_drifted_farthest_in_one_column_leaks(nn, letter_quiz):
    """The test of the test: round 5's quizzes passed the old rules (the bug not the farthest in
    most columns) but "the weights moved most: that one" named the bug in 00–03. They fail now."""
    (leak,) = find_leaks(_quiz(ROUND5[nn], letter_quiz))
    assert "largest difference of column 4" in leak and "the larger Δ is the bug" in leak


def test_a_quiz_whose_table_singles_out_the_broken_variant_leaks(letter_quiz):
    ok = "True 1.2e-07 2.8e-08 1.5e-08 849,408 B"
    bug = "False 9.0e-03 4.5e-02 1.2e-02 837,888 B"
    rounding = "False 1.6e-05 1.4e-04 5.5e-05 424,704 B"
    (leak,) = find_leaks(_quiz({"A": ok, "B": bug, "C": ok}, letter_quiz))
    assert "only for variant B" in leak
    (leak,) = find_leaks(_quiz({"A": ok, "B": bug, "C": rounding}, letter_quiz))
    assert "largest difference of column 2" in leak
    # a legitimate suspect farther from the reference in every column: no Δ names the bug
    topk = "False 2.5e-02 2.8e-01 4.0e-02 16,992 B"
    assert find_leaks(_quiz({"A": ok, "B": bug, "C": topk}, letter_quiz)) == []
    # … unless another column still does: the only variant that sends nothing
    far_half = "False 2.5e-02 2.8e-01 4.0e-02 424,704 B"   # farther, half the bytes (the ok row's within 10×)
    (leak,) = find_leaks(_quiz({"A": ok, "B": "False 9.0e-03 4.5e-02 1.2e-02 0 B", "C": far_half}, letter_quiz))
    assert "column 5" in leak


def test_largest_somewhere_reads_only_the_difference_columns_and_a_tie_is_not_the_largest():
    rows = {"A": ["True", "1.2e-07", "2.8e-08", "1.5e-08", "849,408", "B"],
            "B": ["False", "2.6e-06", "3.5e-05", "5.5e-05", "844,800", "B"],
            "C": ["False", "1.6e-05", "1.4e-04", "5.5e-05", "424,704", "B"]}
    assert singled_out(rows, "B") is None                   # the largest in no Δ column (a tie in one)
    rows["B"][3] = "1.0e-03"
    assert "column 4" in largest_somewhere(rows, "B")
    rows["B"][4] = "999,999,999"                            # the bytes column is not a difference column
    rows["B"][3] = "5.5e-05"
    assert largest_somewhere(rows, "B") is None


def test_a_quiz_whose_bug_prints_the_one_stand_out_number_leaks():
    """04's round-4 table: its 1.0e+01 is 5,000× any number the other rows print — the biggest
    number names it."""
    rows = {"A": ["False", "3.1e-04", "1.6e-03", "2.0e-03", "131,072", "B"],
            "B": ["False", "1.2e-06", "1.0e+01", "3.3e-04", "131,072", "B"],
            "C": ["True", "4.8e-07", "1.6e-08", "1.9e-06", "131,072", "B"]}
    assert "5,000× every difference the other rows print" in stands_out(rows, "B")
    # a decoy that is as far in that column and farther in another: no stand-out number, no largest
    rows["A"] = ["False", "1.3e+01", "1.0e+01", "3.3e-04", "131,072", "B"]
    assert singled_out(rows, "B") is None
    # 9× is not an order of magnitude: a second look, not a give-away
    rows["A"] = ["False", "3.1e-04", "1.1e+00", "2.0e-03", "131,072", "B"]
    assert stands_out(rows, "B") is None


def test_every_debugging_quiz_asks_for_the_mechanism_not_the_row():
    """A row letter can be named by a table rule; a quiz's answer is one of its suspects, numbered
    as `suspects()` prints them, and no suspect names a row."""
    quizzes = [n for n in EXERCISES if n.endswith(".debug")]
    assert sorted(quizzes) == [f"{nn}.debug" for nn in ("00", "01", "02", "03", "04")]
    for name in quizzes:
        want, listed = expected_value(name), SUSPECTS[name[:2]]
        assert isinstance(want, int) and not isinstance(want, bool) and get_exercise(name).choice, name
        assert len(listed) >= 4 and 1 <= want <= len(listed) and want == ANSWERS[name[:2]]
        assert [i for i, _ in get_exercise(name).mistakes] == [i for i in range(1, len(listed) + 1) if i != want]
        assert all(s.refuted for i, s in enumerate(listed, 1) if i != want), name


def _printed_suspects(name):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        suspects(name)
    return out.getvalue()


def test_a_mechanism_quiz_leaks_when_its_suspects_are_hidden_name_a_row_or_the_bytes_alone_decide(monkeypatch):
    table = {"A": "True 1.2e-07 2.8e-08 1.5e-08 849,408 B", "B": "False 2.6e-06 3.5e-05 1.0e-03 844,800 B",
             "C": "False 1.6e-05 1.4e-04 5.5e-05 424,704 B"}      # notebook 00's quiz, its bug drifted farthest
    listed = _printed_suspects("00.debug")
    assert find_leaks(_quiz(table, "00.debug", listed)) == []
    (leak,) = find_leaks(_quiz(table, "00.debug"))
    assert "not on screen" in leak
    only_one = (SUSPECTS["00"][2],) + tuple(Suspect(s.text, lambda: 1.0, s.refuted) for s in SUSPECTS["00"][:2])
    monkeypatch.setitem(SUSPECTS, "00", only_one)
    (leak,) = find_leaks(_quiz(table, "00.debug", _printed_suspects("00.debug")))
    assert "only suspect 1's bytes appear in the table" in leak
    naming = SUSPECTS["00"][:2] + (Suspect("variant B never syncs its LayerNorms", lambda: 844_800.0),)
    monkeypatch.setitem(SUSPECTS, "00", naming)
    (leak,) = find_leaks(_quiz(table, "00.debug", _printed_suspects("00.debug")))
    assert "suspect 3 names a row" in leak


def test_singled_out_reads_columns_not_labels():
    rows = variant_table("variant A True 1e-7 5 B\nvariant B False 1e-1 5 B\nvariant C False 1e-4 5 B")
    assert rows["B"] == ["False", "1e-1", "5", "B"] and singled_out(rows, "B") is None
    assert "column 1" in singled_out({"A": ["1e-7"], "B": ["1e-1"], "C": ["2e-7"]}, "B")


def test_every_debugging_quiz_has_a_legitimate_second_suspect():
    from mgpukit.exercises.debugging import MYSTERIES, broken_label

    for name, variants in MYSTERIES.items():
        changed = [label for label, arg, _ in variants if arg not in (None, True)]
        assert broken_label(name) in changed and len(changed) == 2, (name, variants)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_with_exercises_tells_the_reader_about_reveal(path):
    cells = json.loads(path.read_text())["cells"]
    if not any('check("' in "".join(c["source"]) for c in cells if c["cell_type"] == "code"):
        pytest.skip("no exercises")
    told = [c for c in cells if c["cell_type"] == "markdown" and "reveal(" in "".join(c["source"])]
    assert told, f"{path.name}: no markdown cell mentions `reveal(...)`"


def test_nbmake_fails_a_notebook_that_prints_an_answer_before_its_check(tmp_path):
    work = tmp_path / "repo" / "notebooks"
    work.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "conftest.py", work / "conftest.py")

    def notebook(*sources):
        cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                  "outputs": [], "source": s} for i, s in enumerate(sources)]
        return json.dumps({"cells": cells, "metadata": {"kernelspec": {
            "name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5})

    imports = "from mgpukit.exercises import check\nfrom mgpukit.costmodel.comm import bus_factor"
    show = "print(f\"{bus_factor('all_reduce', 16) / bus_factor('all_reduce', 2):.3f}\")"
    ask = f'check("{GROWTH}", None)'
    (work / "leaky.ipynb").write_text(notebook(imports, show, ask))
    (work / "clean.ipynb").write_text(notebook(imports, ask, show))
    home = tmp_path / "home"
    home.mkdir()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbmake",
                          "leaky.ipynb", "clean.ipynb"], cwd=work, env={**os.environ, "HOME": str(home)},
                         capture_output=True, text=True, timeout=240)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 failed, 1 passed" in out and "leaky.ipynb shows exercise answers" in out and "'1.875'" in out, out


def _notebook_conftest():
    """notebooks/conftest.py loaded by path: a plain `import conftest` may find tests/browser's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebooks_conftest", ROOT / "notebooks" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_raw_warning_on_stderr_fails_a_notebook_a_sentence_on_stdout_does_not():
    hook = _notebook_conftest()
    raw_warnings, reader_report = hook.raw_warnings, hook.reader_report
    cell = _code("run()", "ok\n")
    cell["outputs"].append({"output_type": "stream", "name": "stderr",
                            "text": "/x/experiment.py:173: OversubscribedWarning: 3 CPU workers on 2 cores\n  launch(...)\n"})
    found = raw_warnings(_nb(_md("text"), cell))
    assert found == ["cell 1: /x/experiment.py:173: OversubscribedWarning: 3 CPU workers on 2 cores"]
    assert raw_warnings(_nb(_code("run()", "Warning: printed on stdout is a sentence, not a raw warning"))) == []
    assert "shows raw warnings" in reader_report("x.ipynb", _nb(_md("text"), cell))
    assert reader_report("x.ipynb", _nb(_md("text"), _code("run()", "ok\n"))) is None
