"""The package's import graph: no cycles, and the layers import only downwards.

Method: read every module under `mgpukit/` with `ast` (nothing is imported or run), collect
every `import` / `from … import` — at module level and inside functions alike, since a lazy
import that dodges a circle at load time is still a circle — resolve relative imports, and keep
the edges between mgpukit modules. `from pkg import name` counts as an import of `pkg.name`
when that is a module, else of `pkg`.
"""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mgpukit

ROOT = Path(mgpukit.__file__).parent

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache  # every test here reads the same files: parse them once
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The mgpukit modules `name` imports anywhere in its file (package `__init__`s included)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # `import mgpukit.a.b` of a name inside a module
                t = t.rpartition(".")[0]
            if t and t != name and t.split(".")[0] == "mgpukit":
                out.add(t)
    return out


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_shortest_cycle(graph, comp) for comp in comps]


def _shortest_cycle(graph, comp) -> list[str]:
    """A shortest cycle inside one component, starting from its first module by name."""
    start = min(comp)
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for w in sorted(graph[path[-1]] & comp):
                if w == start:
                    return path + [start]
                if w not in seen:
                    seen.add(w)
                    nxt.append(path + [w])
        paths = nxt
    return sorted(comp)


def _show(cycles) -> str:
    return "\n".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_lazy_and_relative_imports():
    """The test of the test: a function-level import and a relative one are both edges."""
    graph = import_graph()
    assert "mgpukit.costmodel.profile" in graph["mgpukit.costmodel.comm"]
    assert graph["mgpukit"], "mgpukit/__init__.py imports something"
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    """No module imports, even lazily inside a function, one that imports it back."""
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles:\n" + _show(cycles)


def _layer(graph, package: str) -> dict[str, set[str]]:
    return {m: deps for m, deps in graph.items() if m == package or m.startswith(package + ".")}


def _third_party(package: str) -> dict[str, set[str]]:
    """Top-level names of the non-mgpukit modules each module of `package` imports."""
    out = {}
    for name, path in _modules().items():
        if name != package and not name.startswith(package + "."):
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
        out[name] = names
    return out


# Leaf utilities below every layer: standard library only (atomic files, signals, strict JSON), no torch.
LEAVES = ("mgpukit.files", "mgpukit.signals", "mgpukit.strict_json")


def test_the_leaf_utilities_import_nothing_of_mgpukit_but_each_other():
    graph = import_graph()
    for leaf in LEAVES:
        assert set(graph[leaf]) <= set(LEAVES), (leaf, graph[leaf])
        assert not _third_party(leaf)[leaf] & {"torch", "numpy", "accelerate"}


def test_costmodel_is_the_bottom_layer():
    """The cost model is pure arithmetic: no torch, and nothing from mgpukit outside itself (its
    command line, which writes `--json` files, is `mgpukit.commands.plan`)."""
    graph = import_graph()
    bad = {m: sorted(d for d in deps if not d.startswith("mgpukit.costmodel"))
           for m, deps in _layer(graph, "mgpukit.costmodel").items()}
    assert not {m: d for m, d in bad.items() if d}
    torch_users = [m for m, names in _third_party("mgpukit.costmodel").items() if "torch" in names]
    assert not torch_users


def test_the_cost_model_loads_without_torch():
    """Not just its own imports: loading it (with the `mgpukit` package above it) pulls no torch."""
    code = ("import sys, mgpukit.costmodel, mgpukit.costmodel.simulate, mgpukit.commands.plan; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("package, forbidden", [
    ("mgpukit.models", ("mgpukit.strategies",)),
    ("mgpukit.measure", ("mgpukit.strategies", "mgpukit.training", "mgpukit.experiment")),
    ("mgpukit.training", ("mgpukit.strategies", "mgpukit.parallelize", "mgpukit.experiment",
                          "mgpukit.lessons")),
    ("mgpukit.strategies", ("mgpukit.parallelize", "mgpukit.experiment", "mgpukit.lessons",
                            "mgpukit.plots", "mgpukit.widgets", "mgpukit.cli", "mgpukit.training.trainer")),
    ("mgpukit.runtime", ("mgpukit.strategies", "mgpukit.measure", "mgpukit.plots", "mgpukit.widgets")),
    ("mgpukit.lessons", ("mgpukit.widgets", "mgpukit.exercises", "mgpukit.bench", "mgpukit.cli")),
    ("mgpukit.prepare", ("mgpukit.experiment", "mgpukit.parallelize", "mgpukit.lessons")),
    # `mgpukit calibrate` fits what `bench reference` fits, from the layer below both
    ("mgpukit.calibrate_gpu", ("mgpukit.bench", "mgpukit.cli")),
    ("mgpukit.calibrate", ("mgpukit.bench", "mgpukit.cli")),
])
def test_lower_layers_do_not_import_upper_ones(package, forbidden):
    graph = import_graph()
    bad = {m: sorted(d for d in deps if d.startswith(forbidden))
           for m, deps in _layer(graph, package).items()}
    assert not {m: d for m, d in bad.items() if d}


def _reason(comment: str) -> bool:
    """A comment that says something besides a linter's directive (`noqa: F401` alone is no reason)."""
    said = re.sub(r"noqa(:\s*[A-Z]+\d+(\s*,\s*[A-Z]+\d+)*)?|type:\s*ignore(\[[^\]]*\])?", "", comment)
    return bool(re.search(r"[A-Za-z]", said))


def lazy_imports(source: str) -> list[int]:
    """Lines of imports made inside a function (the kit's own modules, the standard library's or a
    third party's) with no comment saying why (on the import's lines or the line before it). An
    import tried inside `try: … except ImportError` says why by itself: the module may be absent."""
    lines = source.splitlines()
    bad = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        optional = {id(node) for t in ast.walk(fn) if isinstance(t, ast.Try)
                    and any(h.type is not None and "ImportError" in ast.unparse(h.type) for h in t.handlers)
                    for node in t.body}
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in optional:
                continue
            own = "".join(lines[node.lineno - 1:node.end_lineno])
            before = lines[node.lineno - 2].strip()
            if not (_reason(own.split("#", 1)[1] if "#" in own else "")
                    or (before.startswith("#") and _reason(before))):
                bad.append(node.lineno)
    return sorted(set(bad))


def test_imports_are_at_the_top_unless_a_comment_says_why():
    """A function-level import says why it is not at the top (the CLI's start-up, a slow or
    optional dependency, a module that must load without torch, a cycle); the layers above make
    every other one unneeded."""
    assert lazy_imports("def f():\n    from mgpukit.files import write_text\n    import torch\n") == [2, 3]
    assert lazy_imports("def f():\n    from mgpukit import cli  # lazy: start-up\n"
                        "    # lazy: optional\n    import ipywidgets\n") == []
    assert lazy_imports("def f():\n    import torch  # noqa: F401\n    import accelerate  # noqa: F401  (lazy: start-up)\n") == [2]
    assert lazy_imports("def f():\n    try:\n        import fcntl\n    except ImportError:\n"
                        "        return None\n") == []
    bad = {name: lazy_imports(path.read_text()) for name, path in _modules().items()}
    assert not {name: lines for name, lines in bad.items() if lines}


# ------------------------------------------------------------------ one job per layer (issue 34)

# The core a learner reads, and the tools around it that the core never imports.
CORE = ("mgpukit.runtime", "mgpukit.models", "mgpukit.strategies", "mgpukit.training",
        "mgpukit.parallelize", "mgpukit.experiment", "mgpukit.measure", "mgpukit.costmodel")
TOOLS = ("mgpukit.bench", "mgpukit.calibrate", "mgpukit.calibrate_gpu", "mgpukit.lessons",
         "mgpukit.studies", "mgpukit.plots", "mgpukit.widgets", "mgpukit.cli", "mgpukit.commands",
         # the planner's command line, once inside the cost model (issue 34): now `mgpukit.commands`
         "mgpukit.costmodel.plan_cli", "mgpukit.costmodel.plan_args", "mgpukit.costmodel.plan_format")


def _within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _tool_imports(graph) -> dict[str, list[str]]:
    return {m: sorted(d for d in deps if _within(d, TOOLS)) for m, deps in graph.items()
            if _within(m, CORE) and any(_within(d, TOOLS) for d in deps)}


def test_the_core_imports_no_tool():
    """Runtime, models, strategies, training, parallelize, experiment, measure and the cost model
    never import a benchmark, the calibration, a lesson, a study, a figure, a widget or a
    command line: those are built on the core, and the core reads without them."""
    assert _tool_imports({"mgpukit.training.x": {"mgpukit.plots.style"}}) == {
        "mgpukit.training.x": ["mgpukit.plots.style"]}  # the test of the test
    assert not _tool_imports(import_graph())


# What a lesson adds around the loop (notebook 10's straggler, mixed cluster and backup workers,
# notebook 01's learning-rate rule) and the one module that installs and refuses it (issue 34).
LESSON_HOOKS = ("mgpukit.training.hetero", "mgpukit.training.backup", "mgpukit.training.straggler",
                "mgpukit.training.lr_scaling")
KNOB_SEAM = "mgpukit.training.knob_hooks"


def _lesson_hook_imports(graph) -> dict[str, list[str]]:
    """Modules of the package, outside the lesson hooks, the seam and `lessons/`, that import a
    lesson hook."""
    return {m: sorted(d for d in deps if _within(d, LESSON_HOOKS)) for m, deps in graph.items()
            if not _within(m, (*LESSON_HOOKS, KNOB_SEAM, "mgpukit.lessons"))
            and any(_within(d, LESSON_HOOKS) for d in deps)}


def test_the_core_names_no_lesson_hook():
    """`prepare`, `parallelize`, the experiment, the builders and the trainer import no lesson's
    hook: `training.knob_hooks` turns the knobs into hooks (`hooks_for`) and refuses them
    (`check_knobs`, which `prepare` calls), in one place. (Was: `prepare` imported `backup`, `hetero`
    and `straggler`, `parallelize` and `training.building` imported `hetero`.)"""
    assert _lesson_hook_imports({"mgpukit.prepare": {"mgpukit.training.hetero"}}) == {
        "mgpukit.prepare": ["mgpukit.training.hetero"]}  # the test of the test
    assert not _lesson_hook_imports(import_graph())


def test_the_benchmarks_import_no_lesson():
    """A benchmark times what the library and its studies (`mgpukit.studies`) do, never a
    notebook's composition of them."""
    bad = {m: sorted(d for d in deps if _within(d, ("mgpukit.lessons",)))
           for m, deps in _layer(import_graph(), "mgpukit.bench").items()}
    assert not {m: d for m, d in bad.items() if d}


def _builders(path: Path) -> list[str]:
    """The figure and widget libraries a module imports (plotly's figures, ipywidgets), anywhere."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom)
                 and node.module and not node.level else [])
        found += [n for n in names if n.startswith(("plotly.graph_objects", "ipywidgets", "plotly.graph_objs"))
                  or n in ("plotly.graph_objects", "plotly.express")]
    return found


def test_lessons_build_no_figure_and_no_widget():
    """`lessons/` composes: figures are built in `mgpukit.plots`, controls in `mgpukit.widgets`."""
    bad = {name: _builders(path) for name, path in _modules().items() if _within(name, ("mgpukit.lessons",))}
    assert not {m: b for m, b in bad.items() if b}


def figures_built(source: str) -> list[str]:
    """What a module draws itself: its `plot_*` functions and its calls of a plotly figure or
    trace (`go.Figure(`, `go.Bar(` …); a `go.FigureWidget` is a control, updated in place."""
    tree = ast.parse(source)
    plots = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("plot_")]
    calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
             and n.func.value.id == "go" and n.func.attr != "FigureWidget"]
    return plots + calls


def test_widgets_build_controls_and_call_the_plots():
    """A widget builds controls and calls `mgpukit.plots` for its figure (was: 12 `plot_*` and a
    hand-built bar chart in `widgets/`)."""
    assert figures_built("def plot_x():\n    return go.Figure(go.Bar())\nw = go.FigureWidget()\n") == [
        "plot_x", "go.Figure", "go.Bar"]  # the test of the test
    bad = {name: figures_built(path.read_text()) for name, path in _modules().items()
           if _within(name, ("mgpukit.widgets",))}
    assert not {m: f for m, f in bad.items() if f}


# A module that is a command (`mgpukit <name>`) has the command protocol: `register(sub)` adds its
# parser, `run(args)` runs it, `main(argv)` runs it alone. The same three names in each is the point.
COMMANDS = {"mgpukit.cli", "mgpukit.commands.plan", "mgpukit.calibrate",
            "mgpukit.export", "mgpukit.tour", "mgpukit.exercises.leaks"}
COMMAND_PROTOCOL = {"main", "register", "run"}

# Public names still defined twice, each in another engineer's area (issue 34): who owes the fix.
# A name may leave this list; none may join it.
OWED: dict[str, str] = {}


def public_definitions() -> dict[str, list[str]]:
    """Top-level public functions and classes of every module: name -> ["module:line", ...]."""
    defs: dict[str, list[str]] = {}
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and not node.name.startswith("_")
                    and not (name in COMMANDS and node.name in COMMAND_PROTOCOL)):
                defs.setdefault(node.name, []).append(f"{name}:{node.lineno}")
    return defs


def test_every_public_name_is_defined_once():
    """One definition per public function or class name in the package: a notebook, a test or a
    reader who finds `plot_memory` finds one thing (the command protocol aside; `OWED` lists the
    few still to be merged, each with its owner)."""
    twice = {n: where for n, where in public_definitions().items() if len(where) > 1}
    assert not {n: w for n, w in twice.items() if n not in OWED}


# Private torch modules the kit imports, each in one place with its reason in that docstring.
PRIVATE_TORCH = {"torch.testing._internal.distributed.fake_pg": "mgpukit.measure.shape"}


def test_private_torch_modules_are_named_in_one_place():
    """`torch.testing._internal` is torch's test tooling, not an API: the one module the kit needs
    from it (the fake process group's registration, `measure.shape.fake_group`) is imported there
    alone."""
    where: dict[str, set[str]] = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for mod in mods:
                if mod.startswith("torch.testing._internal"):
                    where.setdefault(mod, set()).add(name)
    assert {mod: sorted(ms) for mod, ms in where.items()} == {m: [w] for m, w in PRIVATE_TORCH.items()}
