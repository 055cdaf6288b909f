"""One layout from the command line to the collective, and strategies that say what they hold.

Method: the layout is resolved once, before launch (`mgpukit.prepare`), and every worker reads
it from its context (`ctx.layout`; degrees from the mesh, `ctx.size`). Checked by reading the
code with `ast` (nothing runs): a function that has a worker context (`ctx`) never reads
`cfg.layout`, and the worker side (`parallelize.py`, `strategies/`, `training/`, `measure/`)
never probes the kit's own objects with `hasattr`/`getattr` — they declare what is read of them
(`Parts.holding`, the `Engine` and `GradSync` protocols, `measure.clock.Clock`,
`models.layered.Layered`). And by running `prepare`: the
refusals name the strategies the registry says compose with an axis.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import mgpukit
import mgpukit.prepare as preparing
from mgpukit import strategies
from mgpukit.cli import build_parser
from mgpukit.commands.plan_args import planned_layout
from mgpukit.config import DENSE_GPT_MODELS, GPT_MODELS, MODELS, MOE_MODELS, RunConfig
from mgpukit.costmodel.layout import Layout
from mgpukit.prepare import prepare
from mgpukit.runtime import launcher
from mgpukit.run_args import LAYOUT_FLAGS, layout_from_args
from mgpukit.runtime.context import worker_context

ROOT = Path(mgpukit.__file__).parent
WORKER_SIDE = [ROOT / "parallelize.py", *sorted((ROOT / "training").glob("*.py")),
               *sorted((ROOT / "strategies").rglob("*.py"))]
GUARDED = [ROOT / "parallelize.py", *sorted((ROOT / "training").glob("*.py")),
           *sorted((ROOT / "strategies").rglob("*.py")), *sorted((ROOT / "measure").glob("*.py"))]
# torch's own objects, whose attributes differ by type or torch version: asking them is asking
# torch, not probing the kit. Each with why; anything else a `hasattr` asks is the kit's own.
TORCH_ATTRS = {
    "to_local": "a DTensor's local shard (a plain tensor has none)",
    "full_tensor": "a DTensor gathered (a plain tensor has none)",
    "placements": "a DTensor's placements",
    "_local_tensor": "a DTensor's storage, read without dispatch (measure/observe.py)",
    "is_view": "an aten OpOverload's schema flag (not every op packet has it)",
    "failures": "torch.distributed.checkpoint's CheckpointException (other errors have none)",
    "storage_meta": "DCP's Metadata (absent in older torch)",
    "relative_path": "DCP's _StorageInfo, unpickled from a checkpoint that may be malformed",
    # a torch Parameter cannot declare a field of ours: tensor_parallel/layers.py tags the ones it
    # cuts, as torch's own FSDP and DTensor tag theirs
    "tp_dim": "the dimension tensor_parallel/layers.py cut a Parameter along",
}
TORCH_MODULES = {"torch", "dist", "torch.distributed", "_fc"}  # an API that differs by torch version


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
    """Attribute probes: `hasattr(x, "name")` or `getattr(x, "name", default)` — asking an
    object whether it has a field — unless `x` is torch's (`TORCH_MODULES`, `TORCH_ATTRS`). A
    `getattr(x, name)` with a computed name is a field read by name, not a probe."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            continue
        asks = (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3))
        torch_s = node.args[1].value in TORCH_ATTRS or ast.unparse(node.args[0]) in TORCH_MODULES
        if asks and not torch_s:
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
    assert probes("hasattr(parts.sync, 'units')\ngetattr(rec, 'shape', False)\n"
                  "hasattr(model, 'blocks')\nhasattr(t, 'to_local')\ngetattr(dist, 'all_gather_single', None)\n"
                  "getattr(self, name)\ngetattr(p.peak_flops, d) / 2\n") == \
        ["1: hasattr(parts.sync, 'units')", "2: getattr(rec, 'shape', False)", "3: hasattr(model, 'blocks')"]
    assert model_lists('A = ("gpt-tiny", "gpt-small", "llama-7b")\nB = ("gpt-tiny", "gpt-small")\n') == [1]
    assert imported("from a.b import c, d\nimport e\n") == {"a.b.c", "a.b.d"}


@pytest.mark.parametrize("path", WORKER_SIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_worker_code_reads_the_layout_from_its_context(path):
    assert not cfg_layout_reads_with_ctx(path.read_text()), (
        f"{path.relative_to(ROOT)}: read `ctx.layout` (degrees: `ctx.size(axis)`) where a worker "
        f"context is at hand, not `cfg.layout`")


@pytest.mark.parametrize("path", GUARDED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_worker_side_asks_the_kits_objects_nothing_by_probing(path):
    """Was: `training/` only, for six words; 31 probes of the kit's own objects stood elsewhere
    (the clocks, the syncs' sharded parts, the model's blocks)."""
    bad = probes(path.read_text())
    assert not bad, (f"{path.relative_to(ROOT)} probes the kit's own objects; declare the field (a "
                     f"protocol) instead:\n" + "\n".join(bad))


def test_every_gradient_sync_declares_what_the_trainer_reads():
    """`GradSync` (training/parts.py): `frees_grads` and `sharded_parts` are declared by every
    class with a `sync(step)` — in its body or a base's — since nothing asks with `getattr`."""
    classes = {}
    for path in [*GUARDED, *sorted((ROOT / "exercises").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node

    def declared(cls: ast.ClassDef, field: str) -> bool:
        here = any(isinstance(n, (ast.FunctionDef, ast.AnnAssign, ast.Assign)) and field in ast.unparse(
            n.target if isinstance(n, ast.AnnAssign) else n.targets[0] if isinstance(n, ast.Assign) else
            ast.Name(n.name)) for n in cls.body)
        return here or any(declared(classes[b.id], field) for b in cls.bases
                           if isinstance(b, ast.Name) and b.id in classes)

    syncs = [c for c in classes.values() if c.name != "GradSync"
             and any(isinstance(n, ast.FunctionDef) and n.name == "sync" and len(n.args.args) == 2
                     for n in c.body)]
    assert len(syncs) >= 12
    missing = [(c.name, f) for c in syncs for f in ("frees_grads", "sharded_parts") if not declared(c, f)]
    assert not missing


def globals_read(source: str) -> list[str]:
    """Calls of the module-global context (`current()`, `set_current(...)`)."""
    return [f"{n.lineno}: {ast.unparse(n)}" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] in ("current", "set_current")]


# the one module that sets the global: the worker, for a function written in a notebook cell
SETS_THE_GLOBAL = {ROOT / "runtime" / "worker.py"}


def test_the_library_passes_the_context_as_an_argument():
    """Was: `run_rank`, `run_ranks`, the in-process reference, the exported scripts, the
    bandwidth lab, then the lessons' and benchmarks' rank functions (tp's LayerNorm bytes, the
    nodes' all-reduce, the overhead pairs, the ring bandwidth) took their context from a module
    global (`set_current` / `current()`); the launch now hands it as the first argument
    (`launch(..., takes_context=True)`), everywhere in the package.
    `mgpukit.current()` stays for functions written in a notebook cell."""
    assert globals_read("ctx = current()\n_context.set_current(None)\nx.current\n") == \
        ["1: current()", "2: _context.set_current(None)"]
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(set(ROOT.rglob("*.py")) - SETS_THE_GLOBAL)}
    found = {p: globals_read(text) for p, text in sources.items() if "current" in text}  # parse only those
    assert not {p: calls for p, calls in found.items() if calls}


def test_the_mesh_is_derived_from_the_layout_and_one_launch_runs_only_its_mesh():
    p = prepare("pp-1f1b", workers=4, layout={"dp": 2})
    ctx = worker_context(rank=3, world_size=4, mode="cpu", device=torch.device("cpu"), t0=0.0, threads=1,
                         layout=p.layout, mesh=False)
    assert ctx.dims == p.dims and (ctx.size("dp"), ctx.size("pp")) == (2, 2)
    assert ctx.with_layout(prepare("pp-gpipe", workers=4, layout={"dp": 2}).layout).layout.schedule == "gpipe"
    with pytest.raises(ValueError, match="cannot run on this launch's mesh"):
        ctx.with_layout(prepare("ddp", workers=4).layout)
    with pytest.raises(ValueError, match="is not the layout's"):
        worker_context(rank=0, world_size=4, mode="cpu", device=torch.device("cpu"), t0=0.0, threads=1,
                       layout=p.layout, dims=prepare("ddp", workers=4).dims, mesh=False)


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


def test_plan_and_run_read_the_same_layout_flags():
    """One argparse definition of the layout flags (`mgpukit.run_args`): `plan` takes them from
    there and reads them back with the same `layout_from_args` as `run`; the planner's one
    resolver (`Layout.on_gpus`) fills in the rest. Was: `plan` defined its own `--dp … --dtype`
    (`--ckpt` into `args.ckpt`) and its own `layout_from_args`, beside `lessons.planning`'s."""
    parser = build_parser()
    flags = ["--dp", "2", "--tp", "2", "--pp", "2", "--no-sp", "--schedule", "1f1b", "--v", "1",
             "--dtype", "fp32"]
    ran = layout_from_args(parser.parse_args(["run", "hybrid", *flags, "--checkpointing", "full"]))
    planned = parser.parse_args(["plan", "--gpus", "8", *flags, "--ckpt", "full"])
    assert layout_from_args(planned) == {**ran, "ep": None}
    assert set(ran) == set(LAYOUT_FLAGS) and ran["sp"] is False and ran["checkpointing"] == "full"
    lay = planned_layout(planned)
    assert (lay.dp, lay.tp, lay.pp, lay.sp, lay.checkpointing, lay.dtype) == (2, 2, 2, False, "full", "fp32")
    assert lay == Layout.on_gpus(8, **{k: v for k, v in ran.items() if k != "ep"}, micro_batches=None)
