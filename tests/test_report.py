"""The HTML report opens offline (plotly.js embedded exactly once), shows one table row per
record with its source, and records.json round-trips."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go

from mgpukit.report import write_records, write_report


def make_record(strategy, mode, world_size, *, profile=None, parity=None):
    """A small record: 3 steps, memory and comm per rank, one fwd/bwd/all_reduce per rank."""
    ranks = [str(r) for r in range(world_size)]
    return {
        "strategy": strategy, "mode": mode, "profile": profile, "world_size": world_size,
        "dims": {"dp": world_size, "tp": 1, "pp": 1}, "config": {},
        "losses": [2.0, 1.6, 1.3], "grad_norms": [1.0, 0.9, 0.8],
        "step_time_s": [0.3, 0.2, 0.2], "tokens_per_s": 1234.0 * world_size,
        "memory": {r: {"params": 1 << 20, "grads": 1 << 20, "optimizer": 2 << 20,
                       "activations": 1 << 19, "peak": 5 << 20, "source": "measured"} for r in ranks},
        "comm": {r: {"bytes_sent": (1 << 20) * (world_size > 1), "bytes_received": 0,
                     "collectives": {"all_reduce": 3}} for r in ranks},
        "timeline": [ev for r in range(world_size) for ev in (
            {"rank": r, "stream": "compute", "kind": "fwd", "microbatch": None, "stage": None,
             "start": 0.0, "end": 0.05, "step": 0},
            {"rank": r, "stream": "compute", "kind": "bwd", "microbatch": None, "stage": None,
             "start": 0.05, "end": 0.15, "step": 0},
            {"rank": r, "stream": "comm", "kind": "all_reduce", "microbatch": None, "stage": None,
             "start": 0.1, "end": 0.18, "step": 0},
        )],
        "bubble_fraction": None,
        "parity": parity,
        "theory": {"memory": {"params": 1 << 20, "grads": 1 << 20, "optimizer": 2 << 20, "activations": 0}},
        "env": {"torch": "2.13.0", "accelerate": "1.2.0", "cores": 2, "gpus": []},
    }


def records():
    ok = {"reference": "single", "max_abs_diff": 0.0, "ok": True}
    return [
        make_record("single", "cpu", 1),
        make_record("ddp", "cpu", 2, parity=ok),
        make_record("ddp", "emulated", 2, profile="h100-nvlink", parity=ok),
    ]


def test_report_has_table_rows_sources_and_plotly_embedded_once(tmp_path):
    extra = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout_title_text="extra — predicted")
    path = write_report(records(), tmp_path / "out", title="tiny tour",
                        extra_figures=[("Planner <check>", extra)], notes=["a note & more"])
    assert path == tmp_path / "out" / "index.html" and path.exists()
    page = path.read_text(encoding="utf-8")

    assert "<h1>tiny tour</h1>" in page
    assert page.count("<tbody><tr>") == 1 and page.count("<tr>") == 1 + 3  # header + one row per record
    assert '<td class="text measured">measured</td>' in page
    assert '<td class="text emulated">emulated</td>' in page
    assert "emulated (virtual clock, profile h100-nvlink)" in page
    assert "torch 2.13.0, accelerate 1.2.0" in page and "CPU only, 2 cores" in page

    # Offline: the plotly.js bundle once, and every figure after it reuses it.
    assert page.count("plotly.js v") == 1
    assert page.count("Plotly.newPlot") == page.count('<div class="figure">')
    # Per strategy: single → loss + timeline + memory; ddp (measured and emulated) → loss + 2 timelines
    # + memory and bytes once per source; + extra.
    assert page.count('<div class="figure">') == 3 + 7 + 1
    assert '">ddp</h2>' in page and '">Planner &lt;check&gt;</h3>' in page  # headings carry anchors
    assert "<p>a note &amp; more</p>" in page
    assert page.index('">Summary</h2>') < page.index('">single</h2>') < page.index('">More figures</h2>')
    toc = page[page.index('<nav class="toc">'):page.index("</nav>")]
    assert toc.index(">Summary<") < toc.index(">single<") < toc.index(">More figures<")


def test_report_without_figures_has_no_plotly(tmp_path):
    bare = {"strategy": "plan", "mode": "analytic", "world_size": 64, "dims": {"dp": 8, "tp": 8, "pp": 1},
            "tokens_per_s": 1e6}
    page = write_report([bare], tmp_path).read_text(encoding="utf-8")
    assert '<td class="text predicted">predicted</td>' in page
    assert "plotly.js v" not in page


def test_write_records_round_trips_numpy_scalars(tmp_path):
    recs = records()
    recs[0]["tokens_per_s"] = np.float32(1.5)
    recs[0]["losses"] = np.array([2.0, 1.0])
    path = write_records(recs, tmp_path)
    assert path == tmp_path / "records.json"
    loaded = json.loads(path.read_text())
    assert len(loaded) == 3 and loaded[0]["tokens_per_s"] == 1.5 and loaded[0]["losses"] == [2.0, 1.0]
    assert loaded[2]["profile"] == "h100-nvlink"


def test_report_headings_are_unique_and_memory_is_split_by_source(tmp_path):
    """Issue 27: the tour's DDP ran measured and emulated at 2 ranks ("Timeline — ddp ×2" twice),
    and its memory figure put MiB-scale CPU bars beside GiB-scale shape-mode bars on one axis."""
    recs = records()
    big = make_record("ddp", "emulated", 2, profile="h100-nvlink")
    big.update(shape=True, config={"model": "gpt2-124m"})
    big["memory"] = {r: {k: v * 2**10 for k, v in m.items() if k != "source"} | {"source": "estimated"}
                     for r, m in big["memory"].items()}
    path = write_report(recs[:2] + [big], tmp_path)
    text = path.read_text()
    sections = text[text.index('">ddp</h2>'):].split("<h2 ")[0]   # the ddp section's figures
    titles = [h.split(">", 1)[1].split("<", 1)[0] for h in sections.split("<h3 ")[1:]]
    assert len(titles) == len(set(titles)), titles
    memory = [t for t in titles if t.startswith("Memory per rank")]
    assert "Memory per rank — measured (cpu)" in memory and any("shape mode gpt2-124m" in t for t in memory)
    assert any(t.startswith("Bytes sent — emulated") for t in titles), titles


def test_percent_never_shows_minus_zero():
    from mgpukit.plots.style import percent

    assert percent(-0.001) == "0%" and percent(-0.02) == "-2%" and percent(0.273, 1) == "27.3%"
