"""The one trainer: the only training loop, and composition through it (dp × pp)."""
import ast
from pathlib import Path

import pytest

import mgpukit
from mgpukit.experiment import run
from mgpukit.prepare import prepare

ROOT = Path(mgpukit.__file__).parent
# the parameter server keeps its own topology (rank 0 steps for everyone); the trainer is the
# only other place an optimizer steps
ALLOWED = {"training/trainer.py", "strategies/communication/param_server.py",
           "calibrate.py"}  # calibrate times the phases of one step; it trains nothing


def _optimizer_steps(path: Path) -> int:
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "step"):
            owner = ast.unparse(node.func.value)
            count += "optim" in owner.lower()
    return count


def test_the_trainer_is_the_only_place_that_steps_an_optimizer():
    steps = {str(p.relative_to(ROOT)): _optimizer_steps(p) for p in ROOT.rglob("*.py")}
    loops = {f: n for f, n in steps.items() if n}
    assert set(loops) <= ALLOWED, f"optimizer.step() outside the trainer: {sorted(set(loops) - ALLOWED)}"
    assert loops.get("training/trainer.py") == 1


@pytest.mark.parametrize("strategy, layout", [("pp-1f1b", {"dp": 2, "pp": 2}),
                                               ("dp-bucketed", {"dp": 2, "pp": 2, "schedule": "1f1b"})])
@pytest.mark.parametrize("mode", ["cpu", "emulated"])
def test_dp_times_pp_composes_with_parity(strategy, layout, mode):
    rec = run(strategy, workers=4, steps=3, mode=mode, profile="h100-nvlink", layout=layout)
    assert rec["parity"]["ok"], rec["parity"]
    assert rec["dims"] == {"dp": 2, "tp": 1, "pp": 2}
    assert rec["layout"]["schedule"] == "1f1b" and rec["layout"]["num_micro_batches"] == 4
    # data parallel really happened: gradients all-reduced over the dp group
    assert rec["comm"]["0"]["collectives"].get("all_reduce", 0) > 0


def test_a_layout_degree_left_out_is_inferred_and_a_bad_one_is_refused():
    assert prepare("pp-1f1b", workers=4, layout={"dp": 2}).cfg.layout.pp == 2
    with pytest.raises(ValueError, match="cannot be combined with pipeline"):
        prepare("ddp", workers=4, layout={"dp": 2, "pp": 2})
    with pytest.raises(ValueError, match="runs the '1f1b' schedule"):
        prepare("pp-1f1b", workers=4, layout={"dp": 2, "pp": 2, "schedule": "gpipe"})
    assert prepare("dp-naive", workers=4, layout={"tp": 2}).cfg.layout.dp == 2  # dp × tp
    with pytest.raises(ValueError, match="zero=1 is not available"):
        prepare("dp-naive", workers=4, layout={"dp": 2, "zero": 1})


def test_unknown_and_mistyped_knobs_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="unknown option 'bucket' .*valid options: .*bucket_mb"):
        prepare("dp-bucketed", workers=2, options={"bucket": 1})
    with pytest.raises(ValueError, match="must be an integer"):
        prepare("pp-interleaved", workers=2, options={"v": "abc"})
    with pytest.raises(ValueError, match="at least 0"):
        prepare("dp-bucketed", workers=2, options={"bucket_mb": -3})
