"""One layout from the command line to the collective, and strategies that say what they hold.

Method: the layout is resolved once, before launch (`mgpukit.prepare`), and every worker reads
it from its context (`ctx.layout`; degrees from the mesh, `ctx.size`). Checked by reading the
code with `ast` (nothing runs): a function that has a worker context (`ctx`) never reads
`cfg.layout`, and `training/` never probes what a strategy built with `hasattr`/`getattr` —
strategies declare it (`Parts.holding`, the `Engine` protocol). And by running `prepare`: the
refusals name the strategies the registry says compose with an axis.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mgpukit
import mgpukit.prepare as preparing
from mgpukit import strategies
from mgpukit.config import DENSE_GPT_MODELS, GPT_MODELS, MODELS, MOE_MODELS, RunConfig
from mgpukit.prepare import prepare
from mgpukit.runtime import launcher

ROOT = Path(mgpukit.__file__).parent
WORKER_SIDE = [ROOT / "parallelize.py", *sorted((ROOT / "training").glob("*.py")),
               *sorted((ROOT / "strategies").rglob("*.py"))]
PROBED = ("parts", "engine", "sync", "module", "model", "unit")  # what a strategy builds


def cfg_layout_reads_with_ctx(source: str) -> list[str]:
    """Functions taking a worker context `ctx` that read `cfg.layout` (the parent's carrier)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "ctx" in [a.arg for a in node.args.args
                                                                                  + node.args.kwonlyargs]:
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Attribute) and sub.attr == "layout"
                        and isinstance(sub.value, ast.Name) and sub.value.id == "cfg"):
                    bad.append(f"{node.name}:{sub.lineno}")
    return bad


def model_lists(source: str) -> list[int]:
    """Lines of tuple/list/set/dict literals naming three or more of the kit's models: a copy of
    `config.MODELS` (two names, as in a benchmark's sweep, are a choice, not a copy)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        items = (node.keys if isinstance(node, ast.Dict)
                 else node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
        names = [e.value for e in items if isinstance(e, ast.Constant) and e.value in MODELS]
        if len(names) >= 3:
            bad.append(node.lineno)
    return bad


def probes(source: str) -> list[str]:
    """`hasattr(x, …)` / `getattr(x, …)` calls whose object names something a strategy built."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr") and node.args):
            target = ast.unparse(node.args[0])
            if any(word in target for word in PROBED):
                bad.append(f"{node.lineno}: {ast.unparse(node)}")
    return bad


def imported(source: str) -> set[str]:
    """`module.name` for every `from module import name` in `source`."""
    return {f"{node.module}.{a.name}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module for a in node.names}


def test_the_checks_see_what_they_forbid():
    """The test of the test: each check flags its own pattern and passes the allowed one."""
    code = ("def apply(module, ctx, rec, cfg):\n    return cfg.layout.dtype, ctx.layout.dtype\n"
            "def theory(cfg, dims):\n    return cfg.layout.v\n")
    assert cfg_layout_reads_with_ctx(code) == ["apply:2"]
    assert probes("hasattr(parts.sync, 'units')\ngetattr(rec, 'shape', False)\n") == \
        ["1: hasattr(parts.sync, 'units')"]
    assert model_lists('A = ("gpt-tiny", "gpt-small", "llama-7b")\nB = ("gpt-tiny", "gpt-small")\n') == [1]
    assert imported("from a.b import c, d\nimport e\n") == {"a.b.c", "a.b.d"}


@pytest.mark.parametrize("path", WORKER_SIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_worker_code_reads_the_layout_from_its_context(path):
    assert not cfg_layout_reads_with_ctx(path.read_text()), (
        f"{path.relative_to(ROOT)}: read `ctx.layout` (degrees: `ctx.size(axis)`) where a worker "
        f"context is at hand, not `cfg.layout`")


@pytest.mark.parametrize("path", sorted((ROOT / "training").glob("*.py")), ids=lambda p: p.name)
def test_training_asks_strategies_nothing_by_probing(path):
    bad = probes(path.read_text())
    assert not bad, f"training/{path.name} probes strategy state; declare it instead:\n" + "\n".join(bad)


@pytest.mark.parametrize("axis, strategy, layout", [("tp", "ddp", {"tp": 2}), ("pp", "ddp", {"pp": 2})])
def test_refusals_name_what_the_registry_says_composes(axis, strategy, layout):
    with pytest.raises(ValueError, match="cannot be combined with") as refused:
        prepare(strategy, workers=4, layout=layout)
    message = str(refused.value)
    for s in strategies.available():
        if axis in s.composes:
            assert s.name in message


def test_the_prepared_layout_is_the_one_carrier():
    """`prepare` resolves once: the run's layout, its mesh shape and the knobs it read agree."""
    p = prepare("pp-interleaved", workers=4, layout={"dp": 2}, steps=2, options={"v": 2})
    assert p.layout is p.cfg.layout
    assert (p.dims.dp, p.dims.tp, p.dims.pp) == (p.layout.dp, p.layout.tp, p.layout.pp) == (2, 1, 2)
    assert p.layout.v == 2 and p.layout.num_micro_batches == 2 * p.dims.pp  # m = 2p, picked once
    assert p.strategy.theory(p.cfg, p.dims)["m"] == p.layout.num_micro_batches


def test_the_model_names_are_listed_once():
    """`config.MODELS` is the one list of model names; the registry's default, tensor
    parallelism's GPT-only list and the CLI's help derive from it, and every name builds."""
    copies = {str(path.relative_to(ROOT)): lines for path in sorted(ROOT.rglob("*.py"))
              if path.name != "config.py" or path.parent != ROOT
              if (lines := model_lists(path.read_text()))}
    assert copies == {}
    assert {s.models for s in strategies.available()} <= {MODELS, GPT_MODELS, DENSE_GPT_MODELS, MOE_MODELS}
    for name in MODELS:
        assert RunConfig(model=name).model_config() is not None
        assert RunConfig(model=name).is_gpt == (name in GPT_MODELS) == (not name.startswith("mlp"))


def test_one_runner_launches_workers_that_train():
    """Only the runner (`experiment.py`) both launches workers and trains them with the one
    trainer: the pipeline lab goes through `prepare` and `experiment.run_each` (one launch for
    several runs) instead of being a second small runner (issue 28)."""
    both = {"mgpukit.training.trainer.train", "mgpukit.runtime.launcher.launch"}
    runners = [str(path.relative_to(ROOT)) for path in sorted(ROOT.rglob("*.py"))
               if both <= imported(path.read_text())]
    assert runners == ["experiment.py"]


def test_a_run_resolves_its_mode_once(monkeypatch):
    """`prepare` resolves the mode; `launch` takes that `ResolvedMode` as it is (it resolved
    it a second time before); a plain string given to `launch` is still resolved there."""
    calls = []

    def counting(mode, world_size, real=launcher.resolve_mode):
        calls.append(mode)
        return real(mode, world_size)

    monkeypatch.setattr(preparing, "resolve_mode", counting)
    monkeypatch.setattr(launcher, "resolve_mode", counting)
    rec = mgpukit.run("single", workers=1, mode="auto", steps=1, parity=False, timeout_s=120)
    assert calls == ["auto"] and rec["mode"] == "cpu" and type(rec["mode"]) is str
    assert launcher.launch(_rank, 1, mode="cpu", timeout_s=60, echo=False) == [0]
    assert calls == ["auto", "cpu"]


def _rank():
    return mgpukit.current().rank
