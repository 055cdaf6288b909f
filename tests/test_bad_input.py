"""Every bad input is refused before anything starts: one line `mgpukit: error: <cause and fix>`
on stderr, exit code 2, no traceback, no worker launched.

Method: the CLI's `main(argv)` runs in this process (fast: no interpreter start per case) with
the launcher's process start replaced by a tripwire; each case must come back as exactly one
stderr line naming its cause. The public functions behind the CLI are fed bad values too and
must raise ValueError (or LaunchError, a RuntimeError naming what to change) before launching.
`tests/test_cli.py` checks the same contract through the real console entry point."""
import math
from pathlib import Path

import pytest

import mgpukit
from mgpukit.cli import main
from mgpukit.runtime import launcher

PROFILE = Path(__file__).resolve().parents[1] / "data" / "hardware" / "h100-nvlink.toml"


@pytest.fixture
def no_launch(monkeypatch):
    def tripwire(*a, **k):
        raise AssertionError("a launch started although the input was bad")
    monkeypatch.setattr(launcher, "_run", tripwire)


@pytest.fixture
def files(tmp_path):
    """Broken inputs on disk: a file that is not TOML, profiles with a negative bandwidth, a NaN
    memory size, a zero FLOP rate and a missing key, a plain file where a folder is expected."""
    text = PROFILE.read_text()

    def variant(name, old_start, new_line):
        lines = [new_line if line.startswith(old_start) else line for line in text.splitlines()]
        assert lines != text.splitlines(), f"{old_start!r} not in the profile"
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        return str(path)
    def as_value(name, value):
        """The table [name] replaced by `name = value` at the top level (a wrong type)."""
        lines, out, skipping = text.splitlines(), [], False
        for line in lines:
            if line.startswith("["):
                skipping = line.split("]")[0].strip("[") == name
            if not skipping:
                out.append(line)
        first = next(i for i, line in enumerate(out) if line.startswith("name ="))
        out.insert(first, f"{name} = {value}")
        path = tmp_path / f"{name}-as-value.toml"
        path.write_text("\n".join(out) + "\n")
        return str(path)
    (tmp_path / "bad.toml").write_text("name = [\n")
    (tmp_path / "plain").write_text("x")
    (tmp_path / "mine.py").write_text("# the user's own script\n")
    return {
        "bad_toml": str(tmp_path / "bad.toml"),
        "neg_beta": variant("neg.toml", "beta =", "beta = -5e9"),
        "nan_mem": variant("nanmem.toml", "memory_bytes =", "memory_bytes = nan"),
        "inf_bw": variant("infbw.toml", "memory_bandwidth =", "memory_bandwidth = inf"),
        "no_name": variant("noname.toml", "name =", "# no name"),
        # wrong value types (issue 25): refused naming the key, never coerced
        "gpn_float": variant("gpnf.toml", "gpus_per_node =", "gpus_per_node = 1.5"),
        "gpn_str": variant("gpns.toml", "gpus_per_node =", 'gpus_per_node = "8"'),
        "gpn_bool": variant("gpnb.toml", "gpus_per_node =", "gpus_per_node = true"),
        "async_str": variant("asyncs.toml", "async =", 'async = "no"'),
        "async_int": variant("asynci.toml", "async =", "async = 0"),
        "tiles_int": variant("tiles.toml", "tiles =", "tiles = 5"),
        "tiles_float": variant("tilesf.toml", "tiles =", "tiles = [[256, 128.5]]"),
        "tiles_empty": variant("tilese.toml", "tiles =", "tiles = []"),
        "sms_float": variant("sms.toml", "sms =", "sms = 132.0"),
        "mem_str": variant("mems.toml", "memory_bytes =", 'memory_bytes = "80GB"'),
        "beta_str": variant("betas.toml", "beta =", 'beta = "fast"'),
        "compute_bool": variant("computeb.toml", "compute =", "compute = true"),
        "name_int": variant("namei.toml", "name =", "name = 5"),
        "peak_value": as_value("peak_flops", "5"),
        "eff_value": as_value("efficiency", "3"),
        "intra_list": as_value("intra_node", "[1, 2]"),
        "launch_str": as_value("launch", '"fast"'),
        "gemm_list": as_value("gemm", "[0.7]"),
        "file": str(tmp_path / "plain"),
        "mine": str(tmp_path / "mine.py"),
        "missing": str(tmp_path / "nope.md"),
    }


# (argv, a piece of the one line that must name the cause)
CLI_CASES = [
    # run: strategy knobs (-o)
    ("run pp-interleaved -o v=0", "must be at least 1"),
    ("run pp-interleaved -o v=abc", "must be an integer"),
    ("run ddp -o v=0", "unknown option 'v'"),
    ("run ddp -o nope=1", "valid options:"),
    ("run dp-bucketed -o bucket_mb=-3", "bucket_mb=-3"),
    ("run dp-bucketed -o bucket_mb=abc", "must be a finite number"),
    ("run dp-bucketed -o bucket_mb=NaN", "must be a finite number"),
    ("run ddp -o =1", "is not KEY=VALUE"),
    ("run ddp -o bucket_mb", "is not KEY=VALUE"),
    ("run ddp -o bucket_mb=", "is not KEY=VALUE"),
    # run: numbers
    ("run ddp --timeout 0", "--timeout: 0"),
    ("run ddp --timeout -5", "--timeout: -5"),
    ("run ddp --timeout nan", "--timeout: nan"),
    ("run ddp --timeout inf", "--timeout: inf"),
    ("run ddp --lr -1", "lr=-1.0"),
    ("run ddp --lr nan", "lr=nan"),
    ("run ddp --lr inf", "lr=inf"),
    ("run ddp --lr abc", "--lr: invalid float value"),
    ("run ddp --workers 0", "--workers: 0 must be at least 1"),
    ("run ddp --workers -2", "--workers: -2"),
    ("run ddp --workers 2.5", "'2.5' is not a whole number"),
    ("run ddp --steps 0", "--steps: 0"),
    ("run ddp --steps x", "not a whole number"),
    ("run ddp --global-batch 0", "--global-batch: 0"),
    ("run ddp --global-batch 7", "multiple of 2"),
    ("run ddp --micro-batches 0", "--micro-batches: 0"),
    ("run ddp --micro-batches 3", "multiple of 6"),
    # run: names and layouts
    ("run nope", "mgpukit list"),
    ("run", "required: strategy"),
    ("run ddp --model nope", "model='nope'"),
    ("run ddp --optimizer nope", "invalid choice: 'nope'"),
    ("run ddp --mode nope", "invalid choice: 'nope'"),
    ("run ddp --mode gpu", "needs 2 GPUs"),
    ("run ddp --mode emulated", "needs a hardware profile"),
    ("run ddp --dp 0", "--dp: 0"),
    ("run ddp --pp 0", "--pp: 0"),
    ("run ddp --v 0", "--v: 0"),
    ("run ddp --dp 3 --workers 2", "3 workers"),
    ("run ddp --workers 3", "multiple of 3"),
    ("run pp-interleaved --workers 4", "cannot be cut into 8 equal pipeline stages"),
    ("run pp-1f1b --pp 2 --schedule gpipe", "runs the '1f1b' schedule"),
    ("run ddp --pp 2", "cannot be combined with pipeline"),
    # run: profiles (validated on load, the file named)
    ("run ddp --emulate nope", "unknown hardware profile 'nope'"),
    ("run ddp --emulate {bad_toml}", "bad.toml"),
    ("run ddp --emulate {neg_beta}", "neg.toml: a link needs finite alpha >= 0 and beta > 0"),
    ("run ddp --emulate {nan_mem}", "nanmem.toml: profile 'h100-nvlink': memory_bytes must be a finite number > 0"),
    ("run ddp --emulate {inf_bw}", "infbw.toml: profile 'h100-nvlink': memory_bandwidth must be a finite"),
    ("run ddp --emulate {no_name}", "lacks the key 'name'"),
    ("run ddp --emulate /nonexistent/x.toml", "no hardware profile file"),
    ("run ddp --emulate {gpn_float}", "gpus_per_node must be a whole number (no decimal point), got float 1.5"),
    ("run ddp --emulate {gpn_str}", "gpus_per_node must be a whole number (no decimal point), got string '8'"),
    ("run ddp --emulate {gpn_bool}", "gpus_per_node must be a whole number (no decimal point), got boolean"),
    ("run ddp --emulate {async_str}", "launch.async must be true or false, got string 'no'"),
    ("run ddp --emulate {async_int}", "launch.async must be true or false, got integer 0"),
    ("run ddp --emulate {tiles_int}", "gemm.tiles must be a list of [rows, columns] pairs"),
    ("run ddp --emulate {tiles_float}", "gemm.tiles must be a list of [rows, columns] pairs"),
    ("run ddp --emulate {tiles_empty}", "gemm.tiles must be a list of [rows, columns] pairs"),
    ("run ddp --emulate {sms_float}", "gemm.sms must be a whole number"),
    ("run ddp --emulate {mem_str}", "memory_bytes must be a number, got string '80GB'"),
    ("run ddp --emulate {beta_str}", "intra_node.beta must be a number, got string 'fast'"),
    ("run ddp --emulate {compute_bool}", "efficiency.compute must be a number, got boolean True"),
    ("run ddp --emulate {name_int}", "name must be a quoted string, got integer 5"),
    ("run ddp --emulate {peak_value}", "peak_flops must be a table"),
    ("run ddp --emulate {eff_value}", "efficiency must be a table"),
    ("run ddp --emulate {intra_list}", "intra_node must be a table ([name] with keys under it), got array [1, 2]"),
    ("run ddp --emulate {launch_str}", "launch must be a table"),
    ("run ddp --emulate {gemm_list}", "gemm must be a table"),
    ("plan --profile {gpn_float}", "gpus_per_node must be a whole number"),
    ("plan --profile {async_str}", "launch.async must be true or false"),
    ("plan --profile {intra_list}", "intra_node must be a table"),
    ("tour --emulate {peak_value}", "peak_flops must be a table"),
    # issue 25, minors: refused, no longer silently ignored
    ("run ddp --mode cpu --emulate h100-nvlink", "runs on the virtual clock (emulated mode), not --mode cpu"),
    ("run ddp --mode gpu --emulate h100-nvlink", "not --mode gpu"),
    ("run ddp --checkpoint-every 2", "--checkpoint-every 2 needs --checkpoint-dir"),
    ("run ddp -o checkpoint_every=2", "needs --checkpoint-dir"),
    ("plan --search --dp 4", "--search chooses the layout itself, so --dp 4 would be ignored"),
    ("plan --search --dp 4 --cp 2", "--dp 4, --cp 2 would be ignored"),
    ("plan --search --tp 3", "no layout has --tp 3"),
    ("plan --search --micro-batches 8", "--micro-batches 8 would be ignored"),
    # issue 25, planner inputs: bounded, one line
    ("plan --gpus 100000000000000000000000000000", "--gpus 100000000000000000000000000000: more than 10^12"),
    ("plan --search --gpus 10000000000000000000000", "more than 10^12 is beyond any cluster"),
    ("plan --global-batch 100000000000000000000000000", "--global-batch 100000000000000000000000000: more than 10^12"),
    ("plan --micro-batch 10000000000000000000", "--micro-batch 10000000000000000000: more than 10^12"),
    ("plan --tp 1000000000000000000000 --gpus 1000000000000000000000", "more than 10^12"),
    ("plan --top 99999999999999999999", "--top 99999999999999999999: more than 10^12"),
    ("run ddp --steps 99999999999999999999999", "is too large (at most 2147483647)"),
    ("run ddp --workers 99999999999999999999", "is too large (at most 2147483647)"),
    ("run ddp --global-batch 99999999999999999999", "is too large"),
    # run: output paths
    ("run ddp --json", "expected one argument"),
    ("run ddp --json {file}/r.json", "is a file, not a directory"),
    ("run ddp --trace {file}/t.json", "is a file, not a directory"),
    ("run ddp --save-weights {file}/w.safetensors", "is a file, not a directory"),
    ("run ddp --profile-torch {file}", "not a directory"),
    # plan
    ("plan --tp 0", "--tp 0"),
    ("plan --gpus 0", "--gpus 0"),
    ("plan --search --gpus 0", "--gpus 0"),
    ("plan --gpus -8", "--gpus -8"),
    ("plan --top -1", "--top -1"),
    ("plan --search --top 0", "--top 0"),
    ("plan --pp 0", "--pp 0"),
    ("plan --dp 0", "--dp 0"),
    ("plan --v 0", "--v 0"),
    ("plan --micro-batch 0", "--micro-batch 0"),
    ("plan --global-batch -1", "--global-batch -1"),
    ("plan --zero 5", "invalid choice: 5"),
    ("plan --schedule nope", "invalid choice: 'nope'"),
    ("plan --dtype fp4", "invalid choice: 'fp4'"),
    ("plan --dtype fp8 --profile a100-nvlink", "has no fp8 tensor cores"),
    ("plan --dtype fp8 --profile a100-nvlink --search", "has no fp8 tensor cores"),
    ("plan --layers 70 --hidden 14336", "missing heads, vocab, seq"),
    ("plan --model 7b --heads 7", "d_model=4096 must be a multiple of n_head=7"),
    ("plan --model-file {file}/nope.toml", "no model file at"),
    ("plan --layers 0 --hidden 64 --heads 4 --vocab 10 --seq 8", "--layers 0: must be at least 1"),
    ("plan --framework nope", "invalid choice: 'nope'"),
    ("plan --dp-sync sometimes", "invalid choice: 'sometimes'"),
    ("plan --gpus abc", "invalid int value"),
    ("plan --gpus 8 --tp 3", "does not divide --gpus 8"),
    ("plan --model nope", "unknown model 'nope'"),
    ("plan --profile nope", "unknown hardware profile 'nope'"),
    ("plan --profile {bad_toml}", "bad.toml"),
    ("plan --profile {neg_beta}", "neg.toml"),
    ("plan --profile {nan_mem}", "memory_bytes must be a finite number > 0"),
    ("plan --json {file}/p.json", "is a file, not a directory"),
    # plan: time to train and cost
    ("plan --tokens abc", "--tokens abc: not a token count"),
    ("plan --tokens -5", "--tokens -5"),
    ("plan --tokens 0", "at least 1"),
    ("plan --tokens inf", "--tokens inf"),
    ("plan --tokens 2X", "--tokens 2X"),
    ("plan --search --tokens nan", "--tokens nan"),
    ("plan --tokens 2T --price-per-gpu-hour -1", "--price-per-gpu-hour -1.0"),
    ("plan --tokens 2T --price-per-gpu-hour nan", "must be a finite price"),
    ("plan --tokens 2T --price-per-gpu-hour abc", "invalid float value"),
    ("plan --price-per-gpu-hour 2", "needs a token budget"),
    ("plan --epochs 2", "needs --dataset-tokens"),
    ("plan --dataset-tokens 1T", "add --epochs"),
    ("plan --epochs 0 --dataset-tokens 1B", "--epochs 0"),
    ("plan --epochs inf --dataset-tokens 1B", "--epochs inf"),
    ("plan --epochs 2 --dataset-tokens 0", "--dataset-tokens 0"),
    ("plan --epochs 2 --dataset-tokens 1B --tokens 2T", "not both"),
    # bench
    ("bench --repeats -1", "--repeats: -1"),
    ("bench --repeats 0", "--repeats: 0"),
    ("bench --workers 0", "--workers: 0"),
    ("bench --workers -1", "--workers: -1"),
    ("bench nope", "unknown benchmark 'nope'"),
    ("bench launch --json {file}/b.json", "is a file, not a directory"),
    # tour
    ("tour --only dpp", "--only dpp: not a registered strategy"),
    ("tour --only", "--only (nothing)"),
    ("tour --emulate nope", "unknown hardware profile 'nope'"),
    ("tour --emulate {nan_mem}", "memory_bytes must be a finite number > 0"),
    ("tour --steps 0", "--steps: 0"),
    ("tour --workers 0", "--workers: 0"),
    ("tour --out {file}", "is not a directory"),
    ("tour --update-readme {missing}", "no such file"),
    # run: checkpoint and restart
    ("run ddp --max-restarts -1", "--max-restarts: -1 must be 0 or more"),
    ("run ddp --max-restarts x", "'x' is not a whole number"),
    ("run ddp --max-restarts 1.5", "'1.5' is not a whole number"),
    ("run ddp --max-restarts 2", "--max-restarts 2 needs --checkpoint-dir"),
    ("run ddp --max-restarts 1 -o checkpoint_every=1", "needs --checkpoint-dir"),
    ("run ddp --checkpoint-every 0", "--checkpoint-every: 0 must be at least 1"),
    ("run ddp --resume", "resume=true needs checkpoint_dir"),
    ("run ddp --checkpoint-dir {file}", "is not a directory"),
    ("run ddp --checkpoint-dir a -o checkpoint_dir=b", "disagree"),
    # export, calibrate, the rest
    ("export nope", "unknown strategy 'nope'"),
    ("export ddp --out {mine}", "already exists; pass --force"),
    ("export ddp --out {file}/x.py", "is a file, not a directory"),
    ("calibrate --workers 1", "at least 2 workers"),
    ("calibrate --workers 0", "at least 2 workers"),
    ("calibrate --out {file}/m.toml", "is a file, not a directory"),
    ("info --bogus", "unrecognized arguments: --bogus"),
    ("nope-command", "invalid choice: 'nope-command'"),
    ("", "required: command"),
]


def test_the_table_is_big_enough():
    assert len(CLI_CASES) + len(API_CASES) >= 60 and len(CLI_CASES) >= 60


@pytest.mark.parametrize("argv, cause", CLI_CASES, ids=[c[0] or "(none)" for c in CLI_CASES])
def test_a_bad_cli_input_is_one_line_exit_2_nothing_launched(argv, cause, files, no_launch, capsys):
    args = [a.format(**files) for a in argv.split()]
    try:
        code = main(args)
    except SystemExit as e:  # argparse refuses from inside the parser
        code = e.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("mgpukit: error: ") and cause in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out


def _noop():
    return None


# (function, keyword arguments, exception type, a piece of its message)
API_CASES = [
    ("run", dict(strategy="ddp", workers=0), ValueError, "workers=0"),
    ("run", dict(strategy="ddp", workers=2.5), ValueError, "workers=2.5"),
    ("run", dict(strategy="ddp", steps=0), ValueError, "steps must be at least 1"),
    ("run", dict(strategy="ddp", steps="3"), ValueError, "must be a whole number"),
    ("run", dict(strategy="ddp", lr=-1), ValueError, "lr=-1"),
    ("run", dict(strategy="ddp", lr=math.nan), ValueError, "lr=nan"),
    ("run", dict(strategy="ddp", timeout_s=0), ValueError, "timeout_s=0"),
    ("run", dict(strategy="ddp", timeout_s=math.nan), ValueError, "timeout_s=nan"),
    ("run", dict(strategy="dp-bucketed", options={"bucket_mb": -3}), ValueError, "bucket_mb=-3"),
    ("run", dict(strategy="ddp", options={"nope": 1}), ValueError, "unknown option 'nope'"),
    ("run", dict(strategy="ddp", options="bucket_mb=1"), ValueError, "give a dict"),
    ("run", dict(strategy="ddp", mode="nope"), Exception, "mode='nope'"),
    ("run", dict(strategy="ddp", max_restarts=-1), ValueError, "max_restarts=-1"),
    ("run", dict(strategy="ddp", max_restarts=True), ValueError, "max_restarts=True"),
    ("run", dict(strategy="ddp", max_restarts=1), ValueError, "max_restarts needs checkpoint_dir"),
    ("run", dict(strategy="ddp", options={"resume": True}), ValueError, "resume=true needs checkpoint_dir"),
    ("launch", dict(world_size=0), launcher.LaunchError, "world_size"),
    ("launch", dict(world_size=True), launcher.LaunchError, "world_size"),
    ("launch", dict(world_size=2, timeout_s=0), launcher.LaunchError, "timeout_s=0"),
    ("launch", dict(world_size=2, timeout_s=-1), launcher.LaunchError, "timeout_s=-1"),
    ("launch", dict(world_size=2, mode="nope"), launcher.LaunchError, "mode='nope'"),
    ("load_profile", dict(name="{neg_beta}"), ValueError, "neg.toml"),
    ("load_profile", dict(name="{nan_mem}"), ValueError, "nanmem.toml"),
    ("load_profile", dict(name="nope"), ValueError, "unknown hardware profile"),
]


@pytest.mark.parametrize("fn, kwargs, error, cause", API_CASES,
                         ids=[f"{c[0]}-{'-'.join(f'{k}={v}' for k, v in c[1].items())}" for c in API_CASES])
def test_a_bad_argument_to_a_public_function_is_refused_before_launching(fn, kwargs, error, cause, files,
                                                                          no_launch):
    from mgpukit.costmodel.hardware import load_profile

    kwargs = {k: v.format(**files) if isinstance(v, str) else v for k, v in kwargs.items()}
    call = {"run": lambda kw: mgpukit.run(kw.pop("strategy"), **kw),
            "launch": lambda kw: mgpukit.launch(_noop, kw.pop("world_size"), **kw),
            "load_profile": lambda kw: load_profile(kw["name"])}[fn]
    with pytest.raises(error) as info:
        call(dict(kwargs))
    assert cause in str(info.value)
