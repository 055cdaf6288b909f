"""Fast unit tests and slow integration tests, split so the edit-test loop tells you what broke
in under two minutes (issue 34).

`make test-fast` runs ``pytest -m "not slow"``: the cost model, the figures, the import layers,
the docs and notebooks read as files — everything that runs in this process in well under a
second. `make test` runs every test, slow ones included, on parallel workers (pytest-xdist), then
every notebook.

A test is **slow** (marker ``slow``, registered in pyproject.toml) when it launches workers or a
subprocess, runs a study, a benchmark, a calibration, a notebook or the CLI's ``run``. That is
read from the test's source: a test whose body — or a fixture or helper of its module it uses,
followed through — calls one of `LAUNCHES` (or a name shaped like a measurement, `STUDY_SHAPES`)
is marked slow at collection, so a new test lands on the right side by itself. The few that are
slow without launching anything (a real-scale emulation, a search over every layout) are listed
in `MEASURED_SLOW`; ``@pytest.mark.slow`` marks a new one by hand. A test left fast that takes
more than `FAST_BUDGET_S` is named at the end of the run (under pytest-xdist too), so the split
cannot rot silently.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

FAST_BUDGET_S = 3.0  # a test not marked slow that takes longer is named in the summary

# Calls that start processes or run the program (the last name of the call: `mgpukit.run`,
# `subprocess.run`, `launcher.launch` …).
LAUNCHES = {"run", "run_each", "launch", "_launch", "notebook_launcher", "debug_launcher", "Popen",
            "check_output", "check_call", "NotebookRun", "run_lab", "calibrate", "calibrate_device",
            "sleep", "train", "spawn", "fork"}
# Names that measure or run a study: `measure_overhead`, `bench_memory`, `sharding_study` …
STUDY_SHAPES = (("measure_", "bench_", "emulate", "emulated_", "run_", "compare_"),
                ("_study", "_records", "_pairs", "_sweep", "_curves", "_bench", "_runs"))
# Slow in this process without launching anything (a real-scale emulation, a notebook runner, a
# search over every layout), measured from `make test-fast` (tests/ without them, 2026-12-07,
# load ~20 on 2 cores: each took 4-80 s of wall clock there): module -> test names ("*": all).
MEASURED_SLOW = {
    "test_h100_reference.py": {"*"},
    "test_lessons_09.py": {"*"},
    "test_widgets.py": {"test_widget_cells_run_promptly_under_a_notebook_runner"},
    "test_stragglers.py": {"test_rebalanced_straggler_recovers_measured"},
    "test_fit.py": {"test_reference_steps_emulated_on_h200_within_10pct_fit_and_check"},
    "test_lessons_10.py": {"test_local_sgd_claim_says_how_few_steps"},
    "test_carrier.py": {"test_one_runner_launches_workers_that_train"},
    "test_costmodel.py": {"test_search_70b_on_64_gpus_is_fast_and_ranked"},
    "test_mfu_gap.py": {"test_each_step_is_its_terms"},
    "test_planning.py": {"test_llama3_published_layout_planned_with_its_uneven_stages",
                         "test_every_published_row_cites_its_source",
                         "test_throughput_and_gpu_hours_within_loose_bounds_and_the_gap_reported",
                         "test_the_seeds_gpu_hour_rules_hold_only_for_fine_tuning_budgets",
                         "test_the_seeds_gpu_count_rule_fits_but_takes_years"},
    "test_real_gpus.py": {"test_each_measured_gpu_is_labelled_and_held_against_its_own_profile"},
    "test_calibrate_gpu.py": {"test_real_vs_emulated_runs_the_plain_loop_both_ways"},
    "test_emulation.py": {"test_closed_form_charges_what_the_clock_charges_for_the_real_gpt",
                          "test_closed_form_lists_the_clock_kernels_one_by_one"},
    "test_models.py": {"test_a_few_adam_steps_reduce_the_loss"},
    "test_error_bands.py": {"test_layouts_inside_the_best_ones_range_are_ties"},
    # 09's planner widget, every control moved once: 11.9 s in the fast run (2026-12-07)
    "test_notebook_legibility.py": {"test_a_widget_hides_every_later_answer_at_its_defaults_and_after_one_move"},
}
# The CLI in this process is fast (`main(["plan", …])`) unless it runs something.
CLI_RUNS = {"run", "tour", "bench", "calibrate", "export"}


def _called(fn: ast.AST) -> tuple[set[str], bool]:
    """(names `fn` calls, whether any call is itself slow)."""
    names, slow = set(), False
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        names.add(name)
        if name == "main":
            strings = {c.value for a in node.args for c in ast.walk(a)
                       if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            slow |= bool(strings & CLI_RUNS)
        elif name in LAUNCHES or name.startswith(STUDY_SHAPES[0]) or name.endswith(STUDY_SHAPES[1]):
            slow = True
    return names, slow


@functools.cache
def slow_functions(path: Path) -> frozenset[str]:
    """The module-level functions (tests, fixtures, helpers) of a test file that are slow, each
    followed through the module's own functions it calls and the fixtures it takes."""
    tree = ast.parse(path.read_text())
    fns = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        fns.update({f"{cls.name}.{m.name}": m for m in cls.body if isinstance(m, ast.FunctionDef)})
    uses, slow = {}, set()
    for name, fn in fns.items():
        called, direct = _called(fn)
        args = {a.arg for a in fn.args.args}
        uses[name] = {n for n in called | args if n in fns}
        if direct:
            slow.add(name)
    changed = True
    while changed:  # through helpers and fixtures, to a fixed point
        changed = False
        for name, deps in uses.items():
            if name not in slow and deps & slow:
                slow.add(name)
                changed = True
    return frozenset(slow)


def _is_slow(item: pytest.Item) -> bool:
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    cls = item.cls.__name__ + "." if getattr(item, "cls", None) else ""
    by_hand = MEASURED_SLOW.get(item.path.name, set())
    return item.path.suffix == ".py" and ("*" in by_hand or name in by_hand
                                          or f"{cls}{name}" in slow_functions(item.path))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


_over_budget: list[tuple[str, float]] = []
_took: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Setup + call + teardown of each test; on the controller too under pytest-xdist (the
    workers send their reports there)."""
    _took[report.nodeid] = _took.get(report.nodeid, 0.0) + report.duration
    if report.when == "teardown":
        took = _took.pop(report.nodeid)
        if took > FAST_BUDGET_S and "slow" not in report.keywords:
            _over_budget.append((report.nodeid, took))


def pytest_terminal_summary(terminalreporter):
    if _over_budget:
        terminalreporter.section("fast tests over budget")
        terminalreporter.write_line(
            f"{len(_over_budget)} test(s) not marked slow took more than {FAST_BUDGET_S:g} s "
            f"(mark them @pytest.mark.slow, or make them faster; tests/conftest.py):")
        for nodeid, took in sorted(_over_budget, key=lambda x: -x[1]):
            terminalreporter.write_line(f"  {took:6.1f} s  {nodeid}")
