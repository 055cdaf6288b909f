"""Fill an `ipywidgets.Output` in one assignment instead of capturing prints into it.

The usual pattern, ``with out: out.clear_output(wait=True); print(...); fig.show()``, routes
each output through the front end: the kernel marks the widget as capturing, the front end
copies every message it sees into the widget and sends the widget's state back. A notebook
runner that mimics a front end (nbclient, hence nbmake and ``jupyter nbconvert --execute``)
can then wait on its own shell channel until the cell's timeout (jupyter/nbclient#312), so a
widget cell that takes 3 s in JupyterLab takes the whole timeout in CI.

`show(out, *items)` builds the outputs here and assigns ``out.outputs`` once: one state update,
nothing echoed, no flicker (the old content is replaced, never blanked first), and it works the
same from a button callback, a slider observer or the first drawing of a widget.
"""
from __future__ import annotations

import contextlib
import traceback


def show(out, *items) -> None:
    """Replace what `out` shows with `items`: strings become text, anything else (a plotly
    Figure, an IPython display object) its rich representation."""
    out.outputs = tuple(_as_output(item) for item in items)


@contextlib.contextmanager
def errors_shown_in(out):
    """Run a callback body; if it raises, show the traceback in `out` instead of losing it to
    the browser's log console (callbacks run outside any cell)."""
    try:
        yield
    except Exception:  # noqa: BLE001 — a widget callback has nobody else to tell
        show(out, traceback.format_exc())


def _as_output(item) -> dict:
    if isinstance(item, str):
        return {"output_type": "stream", "name": "stdout",
                "text": item if item.endswith("\n") else item + "\n"}
    bundle = item._repr_mimebundle_() if hasattr(item, "_repr_mimebundle_") else None
    if isinstance(bundle, tuple):  # IPython allows (data, metadata)
        bundle = bundle[0]
    if not bundle:  # outside a kernel plotly has no renderer: keep a plain-text stand-in
        bundle = {"text/plain": repr(item)}
    return {"output_type": "display_data", "data": bundle, "metadata": {}}
