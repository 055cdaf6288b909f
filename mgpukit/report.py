"""A self-contained HTML report of result records: header, summary table, figures.

`write_report` writes `out_dir/index.html` that opens offline: plotly.js is embedded once,
in the first figure, and every later figure reuses it. Nothing here trains or measures;
it only lays out records (docs/ARCHITECTURE.md, "The result record") and the figures
`mgpukit.plots` draws from them.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from mgpukit.files import write_text
from mgpukit.strict_json import to_json

from .plots import plot_comm_bytes, plot_loss_parity, plot_memory, plot_timeline, table_summary
from .plots.style import MEMORY_CATEGORIES, format_bytes, format_time, record_name, source_label

Record = Mapping[str, Any]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
.measured { color: #1a7f37; } .emulated { color: #9a6700; } .predicted { color: #6639ba; }
.fail { color: #cf222e; font-weight: bold; }
.figure { margin: 1rem 0 2rem; }
nav.toc ul { margin: 0.2rem 0; } nav.toc li { margin: 0.1rem 0; }
nav.toc > ul { columns: 2; }
"""

# (header, key in table_summary's row, formatter); the "source" column is required by design.
_COLUMNS = (
    ("strategy", "strategy", str),
    ("source", "source", str),
    ("mode / profile", "source_label", str),
    ("world size", "world_size", str),
    ("dims", "dims", str),
    ("final loss", "final_loss", lambda v: f"{v:.4f}"),
    ("median step", "median_step_time_s", format_time),
    ("tokens/s", "tokens_per_s", lambda v: f"{v:,.0f}"),
    ("peak memory (max rank)", "peak_memory_bytes", format_bytes),
    ("sent / step (max rank)", "bytes_sent_per_step", format_bytes),
    ("parity", "parity_ok", lambda v: "ok" if v else "FAILED"),
)
_TEXT_COLUMNS = {"strategy", "source", "source_label", "dims"}


def write_records(records: Sequence[Record], out_dir: str | Path) -> Path:
    """Write the records as `out_dir/records.json` and return its path."""
    return write_text(Path(out_dir) / "records.json", to_json(list(records), indent=1) + "\n",
                      what="records")


def write_report(
    records: Sequence[Record],
    out_dir: str | Path,
    *,
    title: str = "mgpukit tour",
    extra_figures: Iterable[tuple[str, go.Figure]] = (),
    notes: Iterable[str] = (),
) -> Path:
    """Write `out_dir/index.html`: header, summary table, figures per strategy, extra figures."""
    records = list(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = _FigureEmbedder()
    toc = _Contents()

    body = [
        toc.heading(2, "Summary"),
        _table_html(table_summary(records)) if records else "<p>No records.</p>",
    ]
    for strategy, group in _by_strategy(records).items():
        body.append(toc.heading(2, strategy))
        for heading, fig in _strategy_figures(group, records):
            body.append(toc.heading(3, heading))
            body.append(figures.html(fig))
    extra = list(extra_figures)
    if extra:
        body.append(toc.heading(2, "More figures"))
        for heading, fig in extra:
            body.append(toc.heading(3, heading))
            body.append(figures.html(fig))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        _header_html(records),
        *(f"<p>{html.escape(n)}</p>" for n in notes),
        toc.html(),
        *body,
        "</body></html>",
    ]

    return write_text(out / "index.html", "\n".join(parts), what="report")


class _Contents:
    """Headings with anchors, and the contents list that links to them (a report of 80
    figures is unreadable without one): one entry per section, its figures nested under it."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, str, str]] = []

    def heading(self, level: int, text: str) -> str:
        anchor = f"s{len(self.entries) + 1}"
        self.entries.append((level, text, anchor))
        return f'<h{level} id="{anchor}">{html.escape(text)}</h{level}>'

    def html(self) -> str:
        items, open_sub = [], False
        for level, text, anchor in self.entries:
            link = f'<a href="#{anchor}">{html.escape(text)}</a>'
            if level == 2:
                if open_sub:
                    items.append("</ul></li>")
                    open_sub = False
                items.append(f"<li>{link}")
                items.append("<ul>")
                open_sub = True
            else:
                items.append(f"<li>{link}</li>")
        if open_sub:
            items.append("</ul></li>")
        text = "".join(items).replace("<ul></ul>", "")
        return f'<nav class="toc"><h2>Contents</h2><ul>{text}</ul></nav>'


class _FigureEmbedder:
    """Turns figures into <div>s; only the first carries plotly.js, so the page works offline."""

    def __init__(self) -> None:
        self._js_done = False

    def html(self, fig: go.Figure) -> str:
        div = fig.to_html(full_html=False, include_plotlyjs=not self._js_done,
                          config={"displaylogo": False})
        self._js_done = True
        return f'<div class="figure">{div}</div>'


def _header_html(records: Sequence[Record]) -> str:
    """What was run, on which devices, with which software."""
    runs = "".join(
        f"<li>{html.escape(record_name(r))} — {html.escape(source_label(r))}, "
        f"{len(r.get('losses') or [])} steps</li>"
        for r in records
    )
    devices, software = [], []
    for r in records:
        env = r.get("env") or {}
        gpus = env.get("gpus") or []
        dev = (f"{len(gpus)} GPU(s): " + ", ".join(map(str, gpus))) if gpus else "CPU only"
        if env.get("cores"):
            dev += f", {env['cores']} cores"
        if r.get("mode") == "emulated":
            dev += f" (timings emulated for profile {r.get('profile')})"
        if dev not in devices:
            devices.append(dev)
        sw = ", ".join(f"{k} {env[k]}" for k in ("torch", "accelerate") if env.get(k))
        if sw and sw not in software:
            software.append(sw)
    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (
        f"<p>Generated {html.escape(stamp)}. Measured numbers come from real runs (cpu/gpu), "
        "emulated ones from a virtual clock for a hardware profile, predicted ones from the cost model.</p>"
        f"<h2>What was run</h2><ul>{runs}</ul>"
        f"<p><b>Devices:</b> {html.escape('; '.join(devices) or 'unknown')}<br>"
        f"<b>Software:</b> {html.escape('; '.join(software) or 'unknown')}</p>"
    )


def _table_html(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(
        f'<th class="{"text" if key in _TEXT_COLUMNS else ""}">{html.escape(h)}</th>' for h, key, _ in _COLUMNS
    )
    body = []
    for row in rows:
        cells = []
        for _, key, fmt in _COLUMNS:
            value = row.get(key)
            classes = []
            if key in _TEXT_COLUMNS:
                classes.append("text")
            if key == "source":
                classes.append(str(value))
            if key == "parity_ok" and value is False:
                classes.append("fail")
            text = "—" if value is None or value == "" else fmt(value)
            cells.append(f'<td class="{" ".join(classes)}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _by_strategy(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(str(r.get("strategy", "?")), []).append(r)
    return groups


def _strategy_figures(group: Sequence[Record], records: Sequence[Record]) -> list[tuple[str, go.Figure]]:
    """Loss parity (with the reference runs), one timeline per run, memory, bytes sent."""
    figs: list[tuple[str, go.Figure]] = []
    # shape mode: losses are None (fake tensors have no values) and parity is a string
    learned = [r for r in group if any(v is not None for v in r.get("losses") or [])]
    if learned:
        refs = {r["parity"].get("reference") for r in learned if isinstance(r.get("parity"), dict)}
        extra = [r for r in records if r.get("strategy") in refs and r not in group]
        figs.append(("Loss parity", plot_loss_parity(extra + learned)))
    # a strategy may have run measured and emulated at the same size ("ddp ×2" twice): the
    # heading names the source too whenever the group mixes sources
    mixed = len({source_label(r) for r in group}) > 1
    for r in group:
        timeline = r.get("timeline") or []
        if timeline:
            steps = sorted({e.get("step") for e in timeline if e.get("step") is not None})
            # The last step is the steady state: the first one carries warm-up and setup.
            step = steps[-1] if len(steps) > 1 else None
            name = record_name(r) + (f" — {source_label(r)}" if mixed else "")
            figs.append((f"Timeline — {name}", plot_timeline(r, step=step)))
    # one memory figure and one bytes figure per source: a measured CPU run of the tiny GPT holds
    # MiB, a shape-mode run of a real model GiB — on one axis the small bars would not show
    with_memory = _by_source([r for r in group if r.get("memory")])
    for label, recs in with_memory.items():
        theories = [_theory_memory(r) for r in recs]
        figs.append(("Memory per rank" + (f" — {label}" if len(with_memory) > 1 else ""), plot_memory(
            recs, theory=theories if any(t is not None for t in theories) else None)))
    with_comm = _by_source([r for r in group if any(c.get("bytes_sent") for c in (r.get("comm") or {}).values())])
    for label, recs in with_comm.items():
        figs.append(("Bytes sent" + (f" — {label}" if len(with_comm) > 1 else ""), plot_comm_bytes(recs)))
    return figs


def _by_source(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(source_label(r), []).append(r)
    return groups


def _theory_memory(record: Record) -> Mapping[str, Any] | None:
    """The record's predicted memory when it has a shape plot_memory understands, else None."""
    mem = (record.get("theory") or {}).get("memory")
    if not isinstance(mem, Mapping) or not mem:
        return None
    if any(c in mem for c in MEMORY_CATEGORIES):
        return mem
    ranks = (record.get("memory") or {}).keys()
    if all(isinstance(mem.get(str(k), mem.get(k)), Mapping) for k in ranks):
        return mem
    return None
