"""Hidden answers across the course: earlier notebooks and widget readouts (issue 35).

`leaks.find_leaks` reads one executed notebook top to bottom. A reader also remembers what
earlier notebooks showed (00 printed the bus factor at n = 8 before 02 asks for it), and moves a
widget's controls (an explorer that prints the bubble at every (p, m) answers any bubble question
after one move). This module widens what is "seen" above a check:

- `course_seen(earlier)`: the markdown and outputs of notebooks read before (executed ones when
  nbmake ran them in the same session, the committed markdown otherwise);
- `widget_views(nb, i)`: the widget built by code cell `i` of a notebook — its imports taken from
  the cells above — read at its defaults and after **one move** of any one control (every option
  of a dropdown, every value of a small slider, a spread of a large one), without pressing a
  button (a button launches workers: its result is the reader's own run). The numbers a control
  is set to are not read (they are the reader's setting), nor a cell tagged `wall-clock` (a widget
  that measures on this machine). A widget is held against the exercises below it in its own
  notebook: a later notebook's answer matching a number on another topic's slider is a coincidence.

`course_leaks(stem, nb, seen)` reports each of notebook `nb`'s exercises whose numeric answer, or
a figure point at the question's own parameter, is in `seen` — with `leaks.number_leak` and
`leaks.hover_leak`, the same rules as within a notebook.
"""
from __future__ import annotations

import ast
import contextlib
import io
import math
import re

import ipywidgets as widgets
import plotly.io as pio

from mgpukit.exercises.leaks import (_NUMBER, _expected, _question, numbers, _strip_html, _wall_clock, cell_text, exercise_cells, figure_points,
                                     hover_leak, number_leak, output_text)

Seen = list[tuple[str, str, list[tuple[float, float]]]]  # (where, text, plotted points)

# answers a readout gives in words rather than digits: exercise -> the phrase, formatted with the answer
IN_WORDS: dict[str, str] = {
    "07.zero-stage": "fits with ZeRO-{}",  # the explorer lists the layouts that fit, smallest stage first
}

_SPREAD = 24  # values tried on a slider with more positions than this


def notebook_seen(stem: str, nb: dict, upto: int | None = None) -> Seen:
    """What a reader of notebook `stem` has seen by cell `upto` (all of it by default): markdown,
    outputs and figure points, wall-clock cells' numbers left out (see `leaks`)."""
    seen = []
    for i, cell in enumerate(nb["cells"][:upto]):
        if _wall_clock(cell):
            continue
        pts = [p for o in cell.get("outputs", []) for p in figure_points(o)] if cell["cell_type"] == "code" else []
        seen.append((f"{stem} cell {i}", cell_text(cell), pts))
    return seen


def course_leaks(nb: dict, seen: Seen, *, across: bool = False) -> list[str]:
    """One line per exercise of `nb` whose answer is in `seen` (read before the notebook).

    `across=True` when `seen` is other notebooks: a number there is on another topic, so only a
    number shown with 3 or more significant digits, taken as printed (no change of unit), is read,
    and figures' hover points are not — an earlier notebook's loss curve passing (7, 0.229) or its
    "204.8 KiB" are not a pipeline's bubble. Within a notebook and its widgets the rules are `leaks`'."""
    text = [(j, _as_printed(t) if across else t) for j, (_, t, _) in enumerate(seen)]
    points = [] if across else [(j, p) for j, (_, _, p) in enumerate(seen) if p]
    leaks = []
    for i, names in exercise_cells(nb):
        question = _question(nb, i)
        for name in names:
            if name.endswith(".debug"):
                continue  # a quiz's table is read within its notebook (`leaks.quiz_leak`)
            leak = (number_leak(name, text, question) or hover_leak(name, points, question)
                    or word_leak(name, text))
            if leak:
                leaks.append(re.sub(r"in cell (\d+)", lambda m: f"in {seen[int(m.group(1))][0]}", leak))
    return leaks


def _as_printed(text: str) -> str:
    """`text` with numbers of fewer than 3 significant digits masked and every other number cut
    from the unit after it (so it is read as printed, not in another power of 1000 or 1024)."""
    def keep(m):
        shown = numbers(m.group(0))
        return "#" if not shown or shown[0].sig_digits < 3 else m.group(0) + "|"
    return _NUMBER.sub(keep, text)


def word_leak(name: str, seen: list[tuple[int, str]]) -> str | None:
    """Exercise `name`'s answer said in words (`IN_WORDS`) in one of `seen`'s texts, or None."""
    if name not in IN_WORDS:
        return None
    phrase = IN_WORDS[name].format(_expected(name))
    hit = next((j for j, text in seen if phrase in " ".join(text.split())), None)
    return None if hit is None else f"{name}: the answer is on screen before its check — {phrase!r} in cell {hit}"


# ---------------------------------------------------------------- widgets, default and one move

def widget_cells(nb: dict) -> list[int]:
    """Code cells that build an explorer (a call to a function named `*_explorer`)."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        tree = _parse("".join(cell["source"]))
        calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)] if tree else []
        if any((getattr(f, "attr", None) or getattr(f, "id", "")).endswith("_explorer") for f in calls):
            out.append(i)
    return out


def _parse(src: str):
    try:
        return ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                   for line in src.splitlines()))
    except SyntaxError:
        return None


def _imports(nb: dict, upto: int) -> str:
    """The import statements of the code cells above `upto`, in order."""
    lines = []
    for cell in nb["cells"][:upto]:
        tree = _parse("".join(cell["source"])) if cell["cell_type"] == "code" else None
        lines += [ast.unparse(n) for n in (tree.body if tree else []) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(lines)


def _readout(made: list) -> tuple[str, list[tuple[float, float]]]:
    """The text and figure points every readout widget of `made` shows now, with the numbers a
    control is set to masked: "ranks n = 25" repeats the reader's own setting, not a result."""
    given = {float(w.value) for w in _controls(made)
             if isinstance(w.value, (int, float)) and not isinstance(w.value, bool)}
    text, points = [], []
    for w in made:
        if isinstance(w, widgets.Output):
            text += [output_text(o) for o in w.outputs]
            points += [p for o in w.outputs for p in figure_points(o)]
        elif isinstance(w, (widgets.HTML, widgets.HTMLMath, widgets.Label)):
            text.append(_strip_html(w.value))
    return _mask("\n".join(text), given), points


def _mask(text: str, given: set[float]) -> str:
    """`text` with every number whose value is in `given` replaced by '#'."""
    def keep(m):
        shown = numbers(m.group(0))
        return "#" if shown and shown[0].value in given else m.group(0)
    return _NUMBER.sub(keep, text)


def _moves(control) -> list:
    """The values one move of `control` can reach (its current one excluded)."""
    if isinstance(control, (widgets.Dropdown, widgets.ToggleButtons, widgets.RadioButtons,
                            widgets.SelectionSlider, widgets.Select)):
        values = [v for _, v in control._options_full] if hasattr(control, "_options_full") else list(control.options)
        values = [v[1] if isinstance(v, tuple) else v for v in values]
    elif isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        values = [not control.value]
    elif isinstance(control, (widgets.IntSlider, widgets.FloatSlider, widgets.BoundedIntText,
                              widgets.BoundedFloatText)):
        lo, hi, step = control.min, control.max, control.step or 1
        count = int(round((hi - lo) / step)) + 1
        if count <= 4 * _SPREAD:
            values = [lo + k * step for k in range(count)]
        else:
            values = sorted({lo, hi, control.value - step, control.value + step,
                             *(lo + round(k * (count - 1) / _SPREAD) * step for k in range(_SPREAD + 1))})
        if isinstance(control, (widgets.IntSlider, widgets.BoundedIntText)):
            values = [int(v) for v in values]
    elif isinstance(control, widgets.FloatLogSlider):
        k = max(2, min(_SPREAD, int(round((control.max - control.min) / (control.step or 0.1))) + 1))
        values = [control.base ** (control.min + j * (control.max - control.min) / (k - 1)) for j in range(k)]
    else:
        return []
    return [v for v in values if not _same(v, control.value)]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def _controls(made: list) -> list:
    return [w for w in made if isinstance(w, widgets.ValueWidget) and not isinstance(
        w, (widgets.HTML, widgets.HTMLMath, widgets.Label, widgets.Output)) and not getattr(w, "disabled", False)]


def widget_views(stem: str, nb: dict, i: int) -> Seen:
    """What code cell `i`'s widget shows at its defaults and after each single move."""
    renderer = pio.renderers.default
    pio.renderers.default = "plotly_mimetype"  # figures as a front end gets them (JSON), not a repr
    try:
        return _views(stem, nb, i)
    finally:
        pio.renderers.default = renderer


def _views(stem: str, nb: dict, i: int) -> Seen:
    if _wall_clock(nb["cells"][i]):  # a widget that measures on this machine: run-to-run numbers (`leaks`)
        return []
    made: list = []
    widgets.Widget.on_widget_constructed(made.append)  # every widget the cell builds, in order
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(_imports(nb, i) + "\n" + "".join(nb["cells"][i]["source"]), f"{stem} cell {i}", "exec"), {})
    finally:
        widgets.Widget.on_widget_constructed(None)
    text, points = _readout(made)
    views = [(f"{stem} cell {i}'s widget at its defaults", text, points)]
    for control in _controls(made):
        start = control.value
        for value in _moves(control):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    control.value = value
            except Exception:  # noqa: BLE001 — a value the control refuses is not a move a reader can make
                continue
            text, points = _readout(made)
            views.append((f"{stem} cell {i}'s widget with {control.description or 'a control'} = {value!r}",
                          text, points))
        with contextlib.redirect_stdout(io.StringIO()):
            control.value = start
    for w in made:
        w.close()
    return views
