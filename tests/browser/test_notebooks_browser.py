"""Every notebook, as a learner runs it: JupyterLab on 127.0.0.1 (a free port, a token), the
notebook opened in Chromium (Debian's package, driven by Playwright — no browser download), all
cells run from the Run menu. Then, in the page itself:

- no output holds a traceback;
- every widget renders (no "Error displaying widget");
- every plotly figure has a finite y-range, a title inside the figure, and a legend that neither
  leaves the figure nor lies over the x-axis title;
- one control of each widget is moved (a dropdown, else a slider; then its Run button if the
  figure waits for one) and the widget's figure must change;
- nothing new or changed under ~/.cache/mgpukit afterwards (notebooks leave no files behind);
- screenshots of every figure and of each notebook, and each notebook as run, land in $MGPUKIT_BROWSER_OUT (default: a
  temporary directory, printed).

MGPUKIT_BROWSER_NOTEBOOKS=02,04 runs a subset (by name prefix).

Run: `make test-browser` (MGPUKIT_BROWSER_TEST=1 pytest tests/browser). Chromium: `apt-get install
chromium`, or MGPUKIT_CHROMIUM=/path/to/chrome. The notebooks run from a temporary copy, so
JupyterLab's autosave never touches the repository.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")
                   if not os.environ.get("MGPUKIT_BROWSER_NOTEBOOKS")  # e.g. "02,04": a subset
                   or any(p.name.startswith(k.strip()) for k in os.environ["MGPUKIT_BROWSER_NOTEBOOKS"].split(",")))
CACHE = Path(os.path.expanduser("~")) / ".cache" / "mgpukit"
CHROMIUM = os.environ.get("MGPUKIT_CHROMIUM", "/usr/bin/chromium")
RUN_TIMEOUT_S = float(os.environ.get("MGPUKIT_BROWSER_NB_TIMEOUT", 480))

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (dev extra)")
if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium, or set MGPUKIT_CHROMIUM",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def out_dir():
    path = Path(os.environ.get("MGPUKIT_BROWSER_OUT") or tempfile.mkdtemp(prefix="mgpukit-browser-"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {path}")
    return path


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """JupyterLab serving a temporary copy of the notebooks; yields its base URL and token."""
    root = tmp_path_factory.mktemp("lab")
    nbdir = root / "notebooks"
    shutil.copytree(ROOT / "notebooks", nbdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "conftest.py"))
    settings = root / "settings"
    for ext, values in {
        # every cell stays in the DOM (the default "full" windowing detaches off-screen cells)
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        f = settings / ext
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(root / "ws"),
           "JUPYTER_RUNTIME_DIR": str(root / "runtime"), "JUPYTER_CONFIG_DIR": str(root / "config")}
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={nbdir}",
         "--ServerApp.open_browser=False"] + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        cwd=nbdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"JupyterLab did not start:\n{(root / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield base, token, nbdir
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


# The notebook on show (other panels, if any, are hidden).
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# Run in the page: one entry per plotly figure with what the checks need.
_FIGURES_JS = """
() => [...document.querySelector(PANEL).querySelectorAll('.js-plotly-plot')].map((gd, i) => {
  const L = gd._fullLayout || {};
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return {l: r.left, r: r.right, t: r.top, b: r.bottom, w: r.width, h: r.height}; };
  const svg = gd.querySelector('.main-svg');
  const legend = gd.querySelector('.legend');
  const scroll = gd.querySelector('.legend .scrollbar');
  return {
    i, title: (L.title && L.title.text) || '',
    yrange: (L.yaxis && L.yaxis.range) || null, ytype: L.yaxis && L.yaxis.type,
    fig: box(svg), legend: L.showlegend === false ? null : box(legend),
    scrollbar: scroll ? box(scroll) : null,
    xtitle: box(gd.querySelector('.g-xtitle')), gtitle: box(gd.querySelector('.g-gtitle')),
    plotw: L._size ? L._size.w : null, width: L.width || null,
  };
})
"""


def _cache_files() -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in CACHE.rglob("*") if p.is_file()} if CACHE.is_dir() else {}


def _overlap(a, b) -> bool:
    return bool(a and b and a["w"] and b["w"] and a["l"] < b["r"] - 1 and b["l"] < a["r"] - 1
                and a["t"] < b["b"] - 1 and b["t"] < a["b"] - 1)


def _inside(inner, outer, slack=2.0) -> bool:
    return (inner["l"] >= outer["l"] - slack and inner["r"] <= outer["r"] + slack
            and inner["t"] >= outer["t"] - slack and inner["b"] <= outer["b"] + slack)


def check_figures(page) -> list[str]:
    problems = []
    for f in page.evaluate(_FIGURES_JS.replace("PANEL", json.dumps(PANEL))):
        name = f"figure {f['i']} ({f['title'][:60]!r})"
        yr = f["yrange"]
        if not (yr and all(isinstance(v, (int, float)) and abs(v) < (20 if f["ytype"] == "log" else 1e15)
                           for v in yr)):
            problems.append(f"{name}: y-range {yr} ({f['ytype']}) is not finite")
        if f["fig"] is None or not f["fig"]["w"]:
            problems.append(f"{name}: not drawn")
            continue
        if f["plotw"] is not None and f["width"] and f["plotw"] < 0.4 * f["width"]:
            problems.append(f"{name}: the plot is squeezed to {f['plotw']:.0f} of {f['width']:.0f} px (by its legend?)")
        if f["gtitle"] and f["gtitle"]["w"] and not _inside(f["gtitle"], f["fig"]):
            problems.append(f"{name}: title {f['gtitle']} runs outside the figure {f['fig']}")
        if f["legend"] and f["legend"]["w"]:
            if not _inside(f["legend"], f["fig"]):
                problems.append(f"{name}: legend {f['legend']} overflows the figure {f['fig']}")
            if f["scrollbar"] and f["scrollbar"]["h"] > 0:
                problems.append(f"{name}: legend taller than its plot (scrollbar)")
            if _overlap(f["legend"], f["xtitle"]):
                problems.append(f"{name}: legend drawn over the x-axis title")
    return problems


def run_all(page, timeout_s: float) -> None:
    """Run > Run All Cells, then wait until every code cell has an execution count."""
    page.locator(f"{PANEL} .jp-Notebook").first.wait_for(timeout=60_000)
    # notebooks stored without a kernelspec ask which kernel to start: take the default
    try:
        page.locator(".jp-Dialog button.jp-mod-accept").click(timeout=15_000)
    except playwright_api.TimeoutError:
        pass
    page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator') !== null "
                           "|| document.querySelector('.jp-KernelStatus') !== null", timeout=60_000)
    page.locator(f"{PANEL} .jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator('li.lm-Menu-item[data-command="runmenu:run-all"]').click()
    # done when no cell is queued or running ("[*]") for a few seconds; "Run All" stops at an
    # error and leaves the rest unnumbered, which the traceback check then reports
    page.wait_for_function(
        f"""() => [...document.querySelector('{PANEL}').querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                  .some(e => /\\d/.test(e.textContent))""",
        timeout=120_000, polling=500)
    idle_since, deadline = None, time.time() + timeout_s
    while time.time() < deadline:
        busy = page.evaluate(f"""() => [...document.querySelector('{PANEL}').querySelectorAll(
                                     '.jp-CodeCell .jp-InputPrompt')].some(e => e.textContent.includes('*'))""")
        if busy:
            idle_since = None
        elif idle_since is None:
            idle_since = time.time()
        elif time.time() - idle_since > 4:
            return
        page.wait_for_timeout(1000)
    raise AssertionError(f"cells still running after {timeout_s:.0f} s")


def saved_notebook(page, path: Path) -> dict:
    """File > Save, then the notebook as JupyterLab wrote it: its outputs are the ground truth
    (the DOM only holds what is drawn)."""
    before = path.stat().st_mtime
    page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()
    page.locator('li.lm-Menu-item[data-command="docmanager:save"]').click()
    # a notebook full of timelines is megabytes of figure JSON: on a loaded 2-core machine its
    # save took over a minute (04)
    deadline = time.time() + 300
    while path.stat().st_mtime == before and time.time() < deadline:
        time.sleep(0.5)
    if path.stat().st_mtime == before:
        raise AssertionError(f"{path.name}: JupyterLab did not save the notebook within 300 s")
    # Jupyter's "atomic" writing keeps a backup but rewrites the file in place: a read while
    # it writes finds it empty or cut short — read again until it parses
    while True:
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            if time.time() > deadline:
                raise
            time.sleep(1.0)


def output_problems(nb: dict) -> list[str]:
    """Code cells that did not run, and outputs that hold an error or a traceback."""
    problems = []
    for k, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        if not cell.get("execution_count"):
            problems.append(f"code cell {k} did not run")
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) if out["output_type"] == "stream" else ""
            if out["output_type"] == "error":
                problems.append(f"code cell {k}: {out['ename']}: {out['evalue']}")
            elif "Traceback (most recent call last)" in text:
                problems.append(f"code cell {k}: a traceback in its output:\n{text[-1500:]}")
    return problems


def widget_signature(box) -> str:
    return box.evaluate("""b => [...b.querySelectorAll('.js-plotly-plot')].map(
        gd => JSON.stringify([(gd._fullLayout.title || {}).text, (gd.data || []).length,
                              (gd.data || []).map(t => (t.y || []).length)])).join('|') + '#' + b.innerText""")


def _in_progress(text: str) -> bool:
    """A widget's progress line ends with "…" ("running ddp on 2 workers…"); a range inside a
    sentence ("MFU 47.4% (45.3% … 51.9%)", the planner's error bars) is not one."""
    return any(line.rstrip().endswith("…") for line in text.splitlines())


def move_one_control(page, box) -> str:
    """Move a control of widget `box`; wait until its figure (or text) changes. Returns what moved."""
    before = widget_signature(box)

    had_figure = box.locator(".js-plotly-plot").count() > 0

    def changed(timeout_ms):
        """True once the widget differs from `before` and has settled: no progress line
        ("running …", "launching …") left, the same for 3 s, its figure drawn again."""
        deadline = time.time() + timeout_ms / 1000
        last, since = None, time.time()
        while time.time() < deadline:
            page.wait_for_timeout(500)
            sig = widget_signature(box)
            if sig != last:
                last, since = sig, time.time()
                continue
            settled = (time.time() - since > 3 and not _in_progress(sig.split("#", 1)[-1])
                       and (not had_figure or box.locator(".js-plotly-plot").count() > 0))
            if settled:
                return sig != before
        return False

    selects = box.locator("select")
    if selects.count():
        sel = selects.first
        options = sel.locator("option").all_inner_texts()
        current = sel.evaluate("s => s.selectedIndex")
        sel.select_option(index=(current + 1) % len(options))
        what = f"dropdown -> {options[(current + 1) % len(options)]!r}"
        if changed(8_000):
            return what
    else:
        handle = box.locator(".noUi-handle").first
        handle.focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        what = "slider moved right"
        if changed(8_000):
            return what
    run = box.locator("button", has_text="Run").or_(box.locator("button", has_text="run"))
    if run.count():
        run.first.click()
        what += ", then its Run button"
        if changed(240_000):
            return what
    raise AssertionError(f"the widget did not change after: {what}")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_in_a_real_browser(notebook, lab, browser, out_dir):
    base, token, nbdir = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    stem = notebook.removesuffix(".ipynb")
    cache_before = _cache_files()
    try:
        # a workspace of its own, reset: only this notebook open in the page
        page.goto(f"{base}/lab/workspaces/{stem}/tree/{notebook}?reset&token={token}",
                  wait_until="domcontentloaded", timeout=120_000)
        run_all(page, RUN_TIMEOUT_S)
        page.wait_for_timeout(3000)  # let the last figures and widgets draw

        executed = saved_notebook(page, nbdir / notebook)
        (out_dir / f"{stem}.executed.ipynb").write_text(json.dumps(executed))  # what the learner saw
        problems = output_problems(executed)
        assert not problems, f"{notebook}:\n" + "\n".join(problems)
        panel = page.locator(PANEL)
        outputs = panel.locator(".jp-OutputArea-output").all_inner_texts()
        tracebacks = [o for o in outputs if "Traceback (most recent call last)" in o or "Error displaying widget" in o]
        assert not tracebacks, f"{notebook}: {tracebacks[0][-3000:]}"

        figs = panel.locator(".js-plotly-plot")
        assert figs.count() > 0, f"{notebook}: no plotly figure drawn"
        for i in range(figs.count()):
            figs.nth(i).scroll_into_view_if_needed()
            figs.nth(i).screenshot(path=str(out_dir / f"{stem}-fig{i:02d}.png"))
        problems = check_figures(page)
        assert not problems, f"{notebook}:\n" + "\n".join(problems)

        boxes = panel.locator(".jp-OutputArea-output > .jupyter-widgets.widget-vbox, "
                              ".jp-OutputArea-output .jupyter-widgets-view > .widget-vbox")
        n_widgets = boxes.count()
        code = "".join("".join(c["source"]) for c in json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
                       if c["cell_type"] == "code")
        if "mgpukit.widgets" in code:
            assert n_widgets > 0, f"{notebook}: a widget cell rendered no widget"
        moved = []
        for k in range(n_widgets):
            box = boxes.nth(k)
            box.scroll_into_view_if_needed()
            moved.append(move_one_control(page, box))
            box.screenshot(path=str(out_dir / f"{stem}-widget{k}-after.png"))
        problems = check_figures(page)
        assert not problems, f"{notebook} (after moving controls):\n" + "\n".join(problems)
        page.screenshot(path=str(out_dir / f"{stem}-page.png"))
        after = _cache_files()
        left = sorted(p for p in after if after[p] != cache_before.get(p))
        assert not left, f"{notebook} left files in {CACHE}: {left}"
        (out_dir / f"{stem}.txt").write_text(f"figures: {figs.count()}\nwidgets moved: {moved}\n"
                                             f"page errors: {errors}\n")
    except BaseException:
        page.screenshot(path=str(out_dir / f"{stem}-FAILED.png"))
        raise
    finally:
        page.close()
        _shutdown_kernels(base, token)


def _shutdown_kernels(base: str, token: str) -> None:
    """Each notebook's kernel ends with its test (idle kernels would hold memory for the rest)."""
    req = urllib.request.Request(f"{base}/api/kernels?token={token}")
    for k in json.loads(urllib.request.urlopen(req, timeout=10).read()):
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}",
                                                      method="DELETE"), timeout=30)
