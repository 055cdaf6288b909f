"""Figure layout that reads well: titles that wrap instead of running off the edge, and
legends that fit beside or below their plot instead of hiding entries behind a scrollbar.

Every figure function in `mgpukit.plots` (and the widgets) ends with `finish(fig, ...)`:

- the title is broken at its " — " / " · " seams into lines of at most `TITLE_CHARS`
  characters, the subtitle (deduplicated parts, smaller, grey) into lines under it, and the top
  margin grows with the number of lines, so nothing is cut at any figure width ≥ ~700 px;
- the legend is either on the right (`legend="right"`), with the plot at least as tall as the
  legend, or below (`legend="below"`), one entry per row under the x-axis title, with the bottom
  margin sized for every row — its rows are counted, not guessed from a width;
- `legend_fits(fig)` states the rule the tests (and the browser test) check.

Sizes are in CSS pixels; plotly's default fonts: title 17 px, legend entries ~19 px per row.
"""
from __future__ import annotations

import html
import re

import plotly.graph_objects as go

TITLE_CHARS = 72      # one title line at 17 px fits ~700 px
SUBTITLE_CHARS = 110  # one subtitle line at 12 px
TITLE_LINE_PX = 24
SUBTITLE_LINE_PX = 17
LEGEND_ROW_PX = 20
LEGEND_PAD_PX = 36    # legend title and padding
AXIS_BOTTOM_PX = 64   # x tick labels + x-axis title
MIN_PLOT_PX = 240
_SEAMS = (" — ", " · ", "; ", ", ")


def wrap(text: str, width: int) -> list[str]:
    """Break `text` into lines of at most `width` characters, at " — ", " · ", "; " or ", "
    seams first, then at spaces; a word longer than `width` stays whole."""
    text = " ".join((text or "").split())
    if len(text) <= width:
        return [text] if text else []
    for seam in _SEAMS:
        if seam in text:
            pieces = text.split(seam)
            lines: list[str] = []
            for i, piece in enumerate(pieces):
                piece = piece + (seam.rstrip() if i < len(pieces) - 1 else "")
                if lines and len(lines[-1]) + 1 + len(piece) <= width:
                    lines[-1] += " " + piece
                else:
                    lines.append(piece)
            if all(len(line) <= width for line in lines):
                return lines
            return [sub for line in lines for sub in wrap(line, width)]
    words, lines = text.split(" "), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}".strip()
    return lines


def _dedupe(subtitle: str) -> str:
    parts, seen = [], set()
    for part in (subtitle or "").split(" · "):
        if part and part not in seen:
            seen.add(part)
            parts.append(part)
    return " · ".join(parts)


def legend_entries(fig: go.Figure) -> int:
    """How many rows a vertical legend of `fig` has (traces shown in the legend)."""
    return sum(1 for t in fig.data if t.showlegend is not False and t.name)


def finish(fig: go.Figure, *, title: str, subtitle: str = "", legend: str = "auto",
           plot_height: int | None = None) -> go.Figure:
    """Lay out `fig`'s title, subtitle and legend so each fits (see the module docstring).

    legend: "right" | "below" | "auto" (below when a legend name is longer than 28 characters,
    which on the right would squeeze the plot) | "none". `plot_height`: the height the plot
    area itself needs (a Gantt's rows), in px.
    """
    title_lines = [html.escape(line, quote=False) for line in wrap(title, TITLE_CHARS)]
    sub_lines = [html.escape(line, quote=False) for line in wrap(_dedupe(subtitle), SUBTITLE_CHARS)]
    extra = TITLE_LINE_PX * max(len(title_lines) - 1, 0)
    top = 24 + TITLE_LINE_PX * len(title_lines) + SUBTITLE_LINE_PX * len(sub_lines) + 12 + extra
    n = legend_entries(fig)
    if legend == "auto":
        longest = max((len(t.name) for t in fig.data if t.name and t.showlegend is not False),
                      default=0)
        legend = "below" if longest > 28 else "right"
    if n == 0:
        legend = "none"
    legend_px = LEGEND_PAD_PX + LEGEND_ROW_PX * n
    plot_px = max(plot_height or MIN_PLOT_PX, MIN_PLOT_PX)
    bottom = AXIS_BOTTOM_PX
    if legend == "right":
        plot_px = max(plot_px, legend_px)
        legend_layout = dict(orientation="v", yref="paper", y=1, yanchor="top", x=1.02,
                             xanchor="left")
    elif legend == "below":
        bottom += legend_px
        # x in paper units at the plot's left edge: a container x made plotly push the left
        # margin by the legend's width
        legend_layout = dict(orientation="v", yref="container", y=0, yanchor="bottom",
                             xref="paper", x=0, xanchor="left")
    else:
        legend_layout = {}
    fig.update_layout(
        # A multi-line title is anchored at its first line in some renderers (JupyterLab's
        # drew a 2-line title 15 px higher than a browser page did): start it a line lower per
        # extra line, and give the top margin that room.
        title=dict(text="<br>".join(title_lines), x=0.01, xanchor="left", xref="container",
                   y=1 - extra / (top + plot_px + bottom), yanchor="top", yref="container",
                   pad=dict(t=12), subtitle=dict(text="<br>".join(sub_lines),
                                                 font=dict(size=12, color="#555"))),
        margin=dict(t=top, b=bottom),
        height=top + plot_px + bottom,
        showlegend=False if legend == "none" else None,
        meta={"mgpukit_legend": legend, "mgpukit_plot_px": plot_px, "mgpukit_title": title,
              "mgpukit_subtitle": subtitle},
    )
    if legend_layout:
        fig.update_layout(legend=legend_layout)
    return fig


def legend_fits(fig: go.Figure) -> bool:
    """True when every legend row has room: beside the plot (plot area at least as tall as
    the legend) or below it (bottom margin holds the axis title and every row)."""
    lay = fig.layout
    n = legend_entries(fig)
    if n == 0 or lay.showlegend is False:
        return True
    placement = (lay.meta or {}).get("mgpukit_legend") if isinstance(lay.meta, dict) else None
    height = lay.height or 450
    top = lay.margin.t if lay.margin.t is not None else 100
    bottom = lay.margin.b if lay.margin.b is not None else 80
    need = LEGEND_PAD_PX + LEGEND_ROW_PX * n
    if placement == "below":
        return bottom >= AXIS_BOTTOM_PX + need
    return height - top - bottom >= need


def title_lines(fig: go.Figure) -> list[str]:
    """The title's and subtitle's lines as drawn, for tests: each fits its width."""
    lines = []
    for text in (fig.layout.title.text, fig.layout.title.subtitle.text):
        lines += [html.unescape(re.sub("<[^>]+>", "", line)) for line in (text or "").split("<br>") if line]
    return lines


def retitle(fig: go.Figure, title: str, subtitle: str | None = None) -> go.Figure:
    """Give a finished figure a new title (and subtitle), laid out again by `finish`."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    return finish(fig, title=title,
                  subtitle=meta.get("mgpukit_subtitle", "") if subtitle is None else subtitle,
                  legend=meta.get("mgpukit_legend", "auto"), plot_height=meta.get("mgpukit_plot_px"))
