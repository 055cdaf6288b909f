"""Issue 38's new bad inputs: one line `mgpukit: error: <cause>`, exit code 2, nothing launched.

Method as in `tests/test_bad_input.py`: the CLI's `main(argv)` runs in this process with the
launcher's process start replaced by a tripwire, and each case must come back as exactly one
stderr line naming its cause. Model and profile files are written from a shipped one with one
line changed (`files` fixture), so each case differs from a good file by the mistake alone.
Each case here failed on the code before issue 38 (a traceback, a hang, or accepted nonsense)."""
import shlex
import time
from pathlib import Path

import pytest

from mgpukit.cli import main
from mgpukit.runtime import launcher

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def no_launch(monkeypatch):
    def tripwire(*a, **k):
        raise AssertionError("a launch started although the input was bad")
    monkeypatch.setattr(launcher, "_run", tripwire)


def _variant(tmp_path, source: Path, name: str, old_start: str, new_line: str, *, first_only=False) -> str:
    lines, done = [], False
    for line in source.read_text().splitlines():
        if line.startswith(old_start) and not (first_only and done):
            line, done = new_line, True
        lines.append(line)
    assert done, f"{old_start!r} not in {source}"
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def files(tmp_path):
    model, profile = DATA / "models" / "7b.toml", DATA / "hardware" / "h100-nvlink.toml"
    text = profile.read_text()
    (tmp_path / "unknown.toml").write_text(text.replace("gpus_per_node =", "gpus_per_nodes = 8\ngpus_per_node ="))
    return {
        "kv_neg": _variant(tmp_path, model, "kvneg.toml", "kv_heads =", "kv_heads = -4"),
        "kv_zero": _variant(tmp_path, model, "kvzero.toml", "kv_heads =", "kv_heads = 0"),
        "name_list": _variant(tmp_path, model, "namelist.toml", "name =", "name = [1, 2]"),
        "layers_huge": _variant(tmp_path, model, "layers.toml", "layers =", f"layers = {2**63 - 1}"),
        "hidden_huge": _variant(tmp_path, model, "hidden.toml", "hidden =", f"hidden = {10**12}"),
        "seq_huge": _variant(tmp_path, model, "seq.toml", "seq =", f"seq = {10**12}"),
        "unknown_key": str(tmp_path / "unknown.toml"),
        "no_forward": _variant(tmp_path, profile, "nofwd.toml", "forward =", "# no forward"),
        "k_half": _variant(tmp_path, profile, "khalf.toml", "k_half =", "k_half = -64", first_only=True),
        "alpha": _variant(tmp_path, profile, "alpha.toml", "alpha =", "alpha = 1e300", first_only=True),
        "memory": _variant(tmp_path, profile, "memory.toml", "memory_bytes =", "memory_bytes = 1e-300"),
    }


MODEL_CASES = [
    ("kv_neg", "kv_heads = -4 is out of range"),
    ("kv_zero", "kv_heads = 0 is out of range"),
    ("name_list", "name must be a quoted string, got array [1, 2]"),
    ("layers_huge", "layers = 9223372036854775807 is out of range"),
    ("hidden_huge", "hidden = 1000000000000 is out of range"),
    ("seq_huge", "seq = 1000000000000 is out of range"),
]
PROFILE_CASES = [
    ("unknown_key", "unknown key 'gpus_per_nodes'"),
    ("no_forward", "attention.forward is missing"),
    ("k_half", "gemm.k_half = -64 is out of range"),
    ("alpha", "intra_node.alpha = 1e+300 is out of range"),
    ("memory", "memory_bytes = 1e-300 is out of range"),
]

CLI_CASES = (
    [(f"plan --model-file {{{key}}}", cause) for key, cause in MODEL_CASES]
    + [(f"plan --model-file {{{key}}} --search", cause) for key, cause in MODEL_CASES]
    + [(f"plan --profile {{{key}}}", cause) for key, cause in PROFILE_CASES]
    + [(f"run ddp --emulate {{{key}}}", cause) for key, cause in PROFILE_CASES]
    + [(f"tour --emulate {{{key}}}", cause) for key, cause in PROFILE_CASES]
    + [
        (f"plan --layers {10**12} --hidden 4096 --heads 32 --vocab 32000 --seq 4096 --search",
         "layers = 1000000000000 is out of range"),
        (f"plan --model 7b --layers {10**12} --search", "layers = 1000000000000 is out of range"),
        (f"plan --model 7b --seq {10**12}", "seq = 1000000000000 is out of range"),
    ]
)


def _fill(arg: str, files: dict) -> str:
    for key, path in files.items():
        arg = arg.replace("{" + key + "}", path)
    return arg


@pytest.mark.parametrize("argv, cause", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_a_bad_input_is_one_line_exit_2_nothing_launched(argv, cause, files, no_launch, capsys):
    args = [_fill(a, files) for a in shlex.split(argv)]
    start = time.perf_counter()
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("mgpukit: error: ") and cause in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert seconds < 30, f"refused only after {seconds:.0f} s"


def test_every_shipped_model_and_profile_passes_the_schema():
    from mgpukit.costmodel.hardware import load_profile
    from mgpukit.costmodel.shapes import load_model_file

    for path in sorted((DATA / "models").glob("*.toml")):
        load_model_file(path)
    for path in sorted((DATA / "hardware").glob("*.toml")):
        load_profile(str(path))
