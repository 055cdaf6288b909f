"""Hidden answers: does a reader see an exercise's answer before its check cell?

A notebook exercise is a cell that calls `check("NN.topic", answer)`. Its expected value lives
in `registry.py`, never in the cell — but another cell can still print it: a table of the
bus factor printed for n = 2…8 answers "by what factor do the bytes grow from 2 to 8 ranks?"
before it is asked. This module reads an **executed** notebook the way a reader does, top to
bottom, and reports every exercise whose answer is already on the screen when the reader
reaches its check cell:

- **what is seen**: every markdown cell, and every code cell's outputs (printed text, rich
  text, the titles, annotations, bar labels and legend names of plotly figures) up to and
  including the check cell's own output (its hint). Code is not read (a number in code is a
  parameter, not a result; `tests/test_exercises.py` keeps answers out of exercise cells).
- **a leak** is a shown number that gives the answer to the precision it is shown with:
  rounded to the shown digits it equals the expected value — as shown, a percentage as a fraction, or,
  when a prefixed unit follows it ("0.032 ms", "1.27 MB"), in any power of 1000 or 1024 — and it lies within the exercise's tolerance (at least 1 %), so a reader who
  copied it would be told "correct". Numbers of one significant digit ("2 µs", "8 GPUs") are
  too common to count; a list answer leaks when each of its informative elements is shown;
  a whole number the question itself gives (`m = 16`) is not a leak of an answer that equals it.
- **a figure's hover** is read too, for the point a reader would hover: a plotted point whose x is a
  number the question gives (within 5 %, in any power of 1000 or 1024 when a prefixed unit follows
  it: "1 MiB" is x = 1,048,576 bytes) and whose y is the answer within the exercise's tolerance —
  a closed form drawn at every m answers "what bubble at m = 12?" on hover, though no label shows it.
- **wall-clock cells are not read for numbers**: a code cell tagged `wall-clock` (cell metadata
  `"tags": ["wall-clock"]`) prints timings of CPU workers on a shared machine, and ratios derived
  from them, which change from run to run; one that lands within a later answer's last digit by
  chance (a measured rows ratio of 0.42 beside a spot-savings answer of 0.425) is a coincidence a
  reader cannot rely on, not a give-away. Its words and quiz tables are still read.
- **a debugging quiz** (`NN.debug`: three variants A/B/C, one broken) asks for the bug's
  **mechanism**: `suspects(name)` lists four mechanisms a reader could blame and the answer is one's
  number (`suspects.py`). A row letter would be a leak whenever the table names the row by itself —
  the only `parity False`, the only large Δ or zero bytes, **the largest Δ of any difference
  column** (the old quizzes: the bug's weights drifted farther than any rounding moved the decoy's,
  so "the larger Δ is the bug" named it), or a largest number 10× above the other rows' — and
  those rules still judge a quiz whose answer is a letter. A mechanism quiz leaks when a suspect
  names a row (picking the row would pick the suspect), when its suspects are not on screen above
  its check, or when fewer than two suspects' bytes appear in the table's bytes column (matching
  the bytes alone would answer it: the reader has to rule suspects out by the shape of their
  differences too).

`find_leaks(nb)` returns one line per leak; `notebooks/conftest.py` runs it on every notebook
nbmake executes (the notebook runs once), `tests/test_hidden_answers.py` tests it on planted
leaks. String answers other than the quizzes' letters are not searched (a word such as
"grad_norms" is a column name, not a give-away).
"""
from __future__ import annotations

import base64
import functools
import html
import json
import math
import re
import sys
from dataclasses import dataclass

import numpy as np

from mgpukit.exercises.registry import get_exercise
from mgpukit.exercises.suspects import SUSPECTS

_CHECK = re.compile(r"""\bcheck\(\s*["']([\w.\-]+)["']""")
# 1,274,112 · 1.750 · 3.2e-01 · −0.5 · 27.3 % · 3/19 (a fraction of two whole numbers)
# (?!\.\d): a number glued to a word ("18.4B", like "124M") is not read at all, rather than cut to "18"
_NUMBER = re.compile(r"(?<![\w.])([-−]?)(\d{1,3}(?:,\d{3})+|\d[\d_]*)(\.\d+)?(?:[eE]([-+]?\d+))?(?![\w])(?!\.\d)"
                     r"(\s?%)?(?:/(\d+)(?![\d.]))?")
_VARIANT = re.compile(r"^\s*variant\s+([A-Z])\b(.*)$", re.M)
_DIFFERENCE = re.compile(r"^\d\.\d+e[-+]\d+$")  # how a quiz table prints a Δ: 1.2e-03
_SCALES = sorted({1000.0 ** k for k in range(-3, 4)} | {1024.0 ** k for k in range(-3, 4)})


# a unit with a prefix after the number ("0.032 ms", "1.27 MB", "6.7 B parameters"): its value
# may be the answer in another power of 1000 or 1024; a bare number or "32 bytes" is taken as shown
_PREFIXED = re.compile(r"\s?(?:[kKMGTPmµμun][A-Za-z/]*|B\b|[mb]illion|thousand)")


@dataclass(frozen=True)
class Shown:
    """A number as the reader sees it: its value, half a unit of its last shown digit, and
    whether a prefixed unit follows it (then it may be the answer in another unit)."""

    value: float
    half_ulp: float
    sig_digits: int
    raw: str
    prefixed: bool = False


def numbers(text: str) -> list[Shown]:
    """Every number in `text` with the precision it is shown with (a percentage as the
    fraction it is, "3/19" as the fraction)."""
    out = []
    for m in _NUMBER.finditer(text):
        sign, whole, frac, exp, pct, denom = m.groups()
        digits = whole.replace(",", "").replace("_", "")
        value = float(digits + (frac or ""))
        decimals = len(frac) - 1 if frac else 0
        e = int(exp) if exp else 0
        value *= 10.0 ** e
        half = 0.5 * 10.0 ** (e - decimals)
        sig = len((digits + (frac or "")[1:]).lstrip("0")) or 1
        if sign:
            value = -value
        raw = m.group(0).strip()
        if denom and not frac and not exp and int(denom):
            out.append(Shown(value / int(denom), 1e-9 * abs(value / int(denom)), 3, raw))
            continue
        if pct:  # "38 %" is the fraction 0.38, never the answer 38
            out.append(Shown(value / 100, half / 100, sig, raw))
            continue
        out.append(Shown(value, half, sig, raw, bool(_PREFIXED.match(text, m.end()))))
    return out


def gives(shown: Shown, expected: float, rel: float) -> bool:
    """Would copying `shown` (in another power of 1000 or 1024 when a prefixed unit follows
    it) answer `expected`?"""
    if shown.sig_digits < 2 or not expected or shown.value == 0:
        return False
    for scale in _SCALES if shown.prefixed else (1.0,):
        v = shown.value * scale
        if (abs(v - expected) <= shown.half_ulp * scale * 1.0001
                and math.isclose(v, expected, rel_tol=max(rel, 0.01))):
            return True
    return False


# ---------------------------------------------------------------- what the reader sees

def _figure_text(fig: dict) -> list[str]:
    """The words and labels a plotly figure draws (not its raw coordinates)."""
    out = []
    layout = fig.get("layout", {})

    def title(t):
        if isinstance(t, dict):
            t = t.get("text")
        if isinstance(t, str):
            out.append(t)
    title(layout.get("title"))
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            title(axis.get("title"))
    out += [a.get("text", "") for a in layout.get("annotations", []) if isinstance(a, dict)]
    for trace in fig.get("data", []):
        if isinstance(trace.get("name"), str) and trace.get("showlegend", True) is not False:
            out.append(trace["name"])
        text = trace.get("text")
        if isinstance(text, str):
            out.append(text)
        elif isinstance(text, list):
            out += [str(t) for t in text if t is not None]
    return out


def _array(values) -> list:
    """A trace's x or y as a list: plain JSON, or plotly's typed array {"dtype", "bdata"}."""
    if isinstance(values, dict) and "bdata" in values:
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values) if isinstance(values, (list, tuple)) else []


def figure_points(output: dict) -> list[tuple[float, float]]:
    """The (x, y) points of every trace of a plotly output whose x and y are numbers (what a
    reader can hover); categorical axes and timelines' label rows give none."""
    fig = output.get("data", {}).get("application/vnd.plotly.v1+json")
    if fig is None:
        return []
    fig = json.loads(fig) if isinstance(fig, str) else fig
    points = []
    for trace in fig.get("data", []):
        for x, y in zip(_array(trace.get("x")), _array(trace.get("y"))):
            if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
                points.append((float(x), float(y)))
    return points


def _strip_html(s: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", s))


def output_text(output: dict) -> str:
    """What one code-cell output shows a reader."""
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    data = output.get("data", {})
    for mime in ("application/vnd.plotly.v1+json",):
        if mime in data:
            fig = data[mime]
            fig = json.loads(fig) if isinstance(fig, str) else fig
            return _strip_html("\n".join(_figure_text(fig)))
    if "application/vnd.jupyter.widget-view+json" in data:
        return ""  # a widget's view: drawn by the browser from its state, not text
    for mime in ("text/markdown", "text/html"):
        if mime in data:
            return _strip_html("".join(data[mime]))
    return "".join(data.get("text/plain", ""))


def cell_text(cell: dict) -> str:
    """A markdown cell's source, or a code cell's outputs."""
    if cell["cell_type"] == "markdown":
        return "".join(cell["source"])
    if cell["cell_type"] == "code":
        return "\n".join(output_text(o) for o in cell.get("outputs", []))
    return ""


def exercise_cells(nb: dict) -> list[tuple[int, list[str]]]:
    """(cell index, exercise names) of every code cell that calls `check("name", ...)`."""
    return [(i, _CHECK.findall("".join(c["source"]))) for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "code" and _CHECK.search("".join(c["source"]))]


def _question(nb: dict, i: int) -> str:
    """The markdown right above check cell `i` (the question it answers)."""
    j, parts = i - 1, []
    while j >= 0 and nb["cells"][j]["cell_type"] == "markdown":
        parts.append("".join(nb["cells"][j]["source"]))
        j -= 1
    return "\n".join(parts)


# ---------------------------------------------------------------- the two kinds of leak

@functools.lru_cache(maxsize=None)
def _expected(name: str):
    """An exercise's expected value, computed once per process (some build a model to count)."""
    return get_exercise(name).expected()


def _flat(value):
    return [x for v in value for x in _flat(v)] if isinstance(value, (list, tuple)) else [value]


def number_leak(name: str, seen: list[tuple[int, str]], question: str) -> str | None:
    """Where the reader already saw exercise `name`'s numeric answer, or None."""
    ex = get_exercise(name)
    want = [v for v in _flat(_expected(name))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v]
    given = {s.value for s in numbers(question)}
    informative = [v for v in want
                   if not (float(v).is_integer() and (abs(v) < 10 or v in given))]
    if not informative:
        return None
    where = []
    for v in informative:
        hit = next(((i, s.raw) for i, text in seen for s in numbers(text)
                    if gives(s, v, ex.rel)), None)
        if hit is None:
            return None
        where.append(f"{v:.6g} shown as {hit[1]!r} in cell {hit[0]}")
    return f"{name}: the answer is on screen before its check — " + "; ".join(where)


def hover_leak(name: str, points: list[tuple[int, list[tuple[float, float]]]], question: str) -> str | None:
    """A plotted point at the question's own parameter whose y is exercise `name`'s answer."""
    ex = get_exercise(name)
    want = [v for v in _flat(_expected(name)) if isinstance(v, (int, float)) and not isinstance(v, bool) and v]
    if len(want) != 1:
        return None
    v, rel = float(want[0]), max(ex.rel, 0.01)
    xs = {s.value * scale for s in numbers(question) if s.value
          for scale in (_SCALES if s.prefixed else (1.0,))}
    for i, pts in points:
        for x, y in pts:
            if math.isclose(y, v, rel_tol=rel) and any(math.isclose(x, q, rel_tol=0.05) for q in xs):
                return (f"{name}: the answer is on a figure's hover before its check — the point "
                        f"({x:.6g}, {y:.6g}) in cell {i}, at the question's own parameter")
    return None


def _token_value(tok: str) -> float | None:
    try:
        return float(tok.replace(",", "").replace("_", ""))
    except ValueError:
        return None


def variant_table(text: str) -> dict[str, list[str]]:
    """{"A": [tokens…], …} from the printed rows that start with "variant X"."""
    return {m.group(1): m.group(2).split() for m in _VARIANT.finditer(text)}


def singled_out(rows: dict[str, list[str]], broken: str) -> str | None:
    """The column that singles `broken` out by itself, or None (see the module docstring)."""
    if broken not in rows or len(rows) < 3:
        return None
    width = min(len(r) for r in rows.values())
    others = [k for k in rows if k != broken]
    for col in range(width):
        mine, theirs = rows[broken][col], [rows[k][col] for k in others]
        values = [_token_value(t) for t in [mine, *theirs]]
        if any(v is None for v in values):
            if mine not in theirs and len(set(theirs)) == 1:
                return f"column {col + 1} reads {mine!r} only for variant {broken}"
            continue
        m, rest = abs(values[0]), [abs(v) for v in values[1:]]
        lo, hi = min(rest), max(rest)
        if not (hi == 0 or (lo > 0 and hi <= 10 * lo)):
            continue  # the other rows disagree among themselves: nothing stands out alone
        alone = m > 0 if hi == 0 else (m == 0 or m >= 10 * hi or m <= lo / 10)
        if alone:
            return (f"column {col + 1}: variant {broken} shows {mine} where the others agree "
                    f"({', '.join(theirs)})")
    return largest_somewhere(rows, broken) or stands_out(rows, broken)


def _differences(rows: dict[str, list[str]]) -> list[int]:
    """The difference columns: those every row prints as `1.2e-03`."""
    width = min(len(r) for r in rows.values())
    return [col for col in range(width) if all(_DIFFERENCE.match(r[col]) for r in rows.values())]


def stands_out(rows: dict[str, list[str]], broken: str) -> str | None:
    """Is the largest Δ `broken` prints 10× or more above every Δ of the other rows (whatever
    the columns)? Then the table's one eye-catching number names the bug."""
    columns = _differences(rows)
    if not columns:
        return None
    mine = max(float(rows[broken][col]) for col in columns)
    theirs = max(float(r[col]) for k, r in rows.items() if k != broken for col in columns)
    if mine > 0 and mine >= 10 * theirs:
        return (f"variant {broken}'s largest difference ({mine:.1e}) is {mine / theirs:,.0f}× every "
                f"difference the other rows print: \"the biggest number is the bug\" answers it"
                if theirs > 0 else f"variant {broken} is the only row with a nonzero difference")
    return None


def largest_somewhere(rows: dict[str, list[str]], broken: str) -> str | None:
    """Is `broken` the row with the largest difference in some difference column? Then a reader
    who reads that column ("the weights moved most: that one") names it without knowing why."""
    for col in _differences(rows):
        if all(float(rows[broken][col]) > float(r[col]) for k, r in rows.items() if k != broken):
            return (f"variant {broken} has the largest difference of column {col + 1} "
                    f"({rows[broken][col]}): \"the larger Δ is the bug\" answers it")
    return None


def _bytes_column(rows: dict[str, list[str]]) -> set[int]:
    """The bytes each row sends, as the table prints them ("849,408 B": the number before "B")."""
    out = set()
    for tokens in rows.values():
        if len(tokens) >= 2 and tokens[-1] == "B" and (v := _token_value(tokens[-2])) is not None:
            out.add(round(v))
    return out


def mechanism_leak(name: str, rows: dict[str, list[str]], seen: list[tuple[int, str]]) -> str | None:
    """A mechanism quiz whose suspects a reader can match to the answer without reasoning, or None."""
    listed = SUSPECTS[name.split(".")[0]]
    naming = [i for i, s in enumerate(listed, 1) if re.search(r"\bvariant\s+[A-Z]\b|\brow\s+[A-Z]\b", s.text)]
    if naming:
        return f"{name}: suspect {naming[0]} names a row — picking the row picks the suspect"
    shown = "\n".join(text for _, text in seen)
    missing = [i for i, s in enumerate(listed, 1) if s.text not in " ".join(shown.split())]
    if missing:
        return f"{name}: suspect {missing[0]} is not on screen above the check (call `suspects({name!r})`)"
    printed = _bytes_column(rows)
    matching = [i for i, s in enumerate(listed, 1) if round(s.sends()) in printed]
    if len(matching) < 2:
        return (f"{name}: only suspect {matching[0] if matching else '—'}'s bytes appear in the table: "
                f"matching the bytes column answers it")
    return None


def quiz_leak(name: str, seen: list[tuple[int, str]]) -> str | None:
    """A debugging quiz whose printed table (or suspect list) gives its answer away, or None."""
    broken = _expected(name)
    rows: dict[str, list[str]] = {}
    for _, text in seen:
        found = variant_table(text)
        if len(found) >= 3:
            rows = found  # the last table above the check cell
    if not rows:
        return None
    if not isinstance(broken, str):  # a suspect's number: the mechanism, not the row
        return mechanism_leak(name, rows, seen)
    why = singled_out(rows, broken)
    return f"{name}: the printed table gives the broken variant away — {why}" if why else None


WALL_CLOCK = "wall-clock"


def _wall_clock(cell: dict) -> bool:
    """Is `cell` tagged as printing run-to-run wall-clock timings (see the module docstring)?"""
    return WALL_CLOCK in cell.get("metadata", {}).get("tags", [])


def find_leaks(nb: dict) -> list[str]:
    """One line per exercise of executed notebook `nb` whose answer a reader sees first."""
    leaks = []
    texts = [cell_text(c) for c in nb["cells"]]
    plotted = [[p for o in c.get("outputs", []) for p in figure_points(o)] if c["cell_type"] == "code" else []
               for c in nb["cells"]]
    for i, names in exercise_cells(nb):
        seen = [(j, texts[j]) for j in range(i + 1)]  # everything above, and the check's own hint
        steady = [(j, t) for j, t in seen if not _wall_clock(nb["cells"][j])]
        points = [(j, plotted[j]) for j in range(i + 1) if plotted[j] and not _wall_clock(nb["cells"][j])]
        for name in names:
            if name.endswith(".debug"):
                leak = quiz_leak(name, seen)
            else:
                question = _question(nb, i)
                leak = number_leak(name, steady, question) or hover_leak(name, points, question)
            if leak:
                leaks.append(leak)
    return leaks


def main(argv=None) -> int:
    """`python -m mgpukit.exercises.leaks executed.ipynb …`: print the leaks, exit 1 if any."""
    bad = 0
    for path in argv if argv is not None else sys.argv[1:]:
        with open(path) as f:
            leaks = find_leaks(json.load(f))
        for line in leaks:
            print(f"{path}: {line}")
        bad += len(leaks)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
