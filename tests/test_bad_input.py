"""Every bad input is refused before anything starts: one line `mgpukit: error: <cause and fix>`
on stderr, exit code 2, no traceback, no worker launched.

Method: the CLI's `main(argv)` runs in this process (fast: no interpreter start per case) with
the launcher's process start replaced by a tripwire; each case must come back as exactly one
stderr line naming its cause. The public functions behind the CLI are fed bad values too and
must raise ValueError (or LaunchError, a RuntimeError naming what to change) before launching.
`tests/test_cli.py` checks the same contract through the real console entry point."""
import math
import shlex
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
            if line.startswith("["):  # the table and its sub-tables ([gemm.fp32])
                table = line.split("]")[0].strip("[")
                skipping = table == name or table.startswith(name + ".")
            if not skipping:
                out.append(line)
        first = next(i for i, line in enumerate(out) if line.startswith("name ="))
        out.insert(first, f"{name} = {value}")
        path = tmp_path / f"{name}-as-value.toml"
        path.write_text("\n".join(out) + "\n")
        return str(path)
    (tmp_path / "bad.toml").write_text("name = [\n")
    (tmp_path / "plain").write_text("x")
    (tmp_path / "adir").mkdir()
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
        "dir": str(tmp_path / "adir"),
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
    ("run ddp --emulate {neg_beta}", "neg.toml: intra_node.beta = -5000000000.0 is out of range"),
    ("run ddp --emulate {nan_mem}", "nanmem.toml: memory_bytes must be a finite number, got nan"),
    ("run ddp --emulate {inf_bw}", "infbw.toml: memory_bandwidth must be a finite number, got inf"),
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
    ("plan --validation --model 70b --gpus 64", "so --model, --gpus would be ignored; drop them"),
    ("plan --framework deepspeed-pipe --schedule interleaved --pp 2 --gpus 2",
     "framework 'deepspeed-pipe' has no 'interleaved' pipeline schedule (it offers 1f1b); choose it"),
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
    ("plan --profile {nan_mem}", "memory_bytes must be a finite number"),
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
    ("tour --emulate {nan_mem}", "memory_bytes must be a finite number"),
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
    # issue 25: a probe's worth more, each one line and exit 2 (inputs tried per class: see
    # `test_the_table_covers_every_class`)
    ('--bogus run', 'the following arguments are required: st'),
    ('--debug', 'the following arguments are required: co'),
    ("bench ''", "unknown benchmark ''; choose from: all,"),
    ('bench comm --workers 0', 'argument --workers: 0 must be at least 1'),
    ('bench launch --json /proc/b.json', 'cannot write --json file /proc/b.json: /'),
    ('bench launch --repeats x', "argument --repeats: 'x' is not a whole n"),
    ('bench launch --workers 99999999999999', 'argument --workers: 99999999999999 is to'),
    ('calibrate --out /proc/m.toml', 'cannot write profile file (--out) /proc/'),
    ('calibrate --out {dir}', 'is a directory; give a file name inside'),
    ('calibrate --workers -1', 'workers=-1: calibrate needs at least 2 w'),
    ('calibrate --workers x', "argument --workers: invalid int value: '"),
    ("export ''", "unknown strategy ''; `mgpukit list` show"),
    ('export --out /proc/x.py', 'cannot write export file (--out) /proc/x'),
    ('export ddp --force --out {file}/x.py', 'is a file, not a directory.'),
    ('export ddp --out {dir}', 'is a directory; give a file name inside'),
    ('export nope --out {dir}/new.py', "unknown strategy 'nope'; `mgpukit list`"),
    ('info extra', 'unrecognized arguments: extra (see `mgpu'),
    ('list --x', 'unrecognized arguments: --x (see `mgpuki'),
    ('plan --ckpt half', "argument --ckpt: invalid choice: 'half'"),
    ('plan --cp 0', '--cp 0: must be at least 1'),
    ('plan --cp 3 --gpus 8', 'tp × pp × cp = 3 does not divide --gpus'),
    ('plan --dataset-tokens abc --epochs 1', '--dataset-tokens abc: not a token count;'),
    ('plan --dp 16 --gpus 8', 'dp × tp × pp = 16 × 1 × 1 = 16, but ther'),
    ('plan --dp 3 --gpus 8', 'dp × tp × pp = 3 × 1 × 1 = 3, but there'),
    ('plan --epochs -1 --dataset-tokens 1B', '--epochs -1.0: must be a finite number >'),
    ('plan --epochs abc --dataset-tokens 1B', 'argument --epochs: invalid float value:'),
    ('plan --epochs nan --dataset-tokens 1B', '--epochs nan: must be a finite number >'),
    ('plan --global-batch 1 --gpus 8', 'global batch 1 is not a multiple of dp ×'),
    ('plan --gpus', 'argument --gpus: expected one argument ('),
    ('plan --gpus 1e9', "argument --gpus: invalid int value: '1e9"),
    ('plan --gpus 64 --tp 3', 'tp × pp = 3 does not divide --gpus 64; c'),
    ('plan --gpus 8 --global-batch 7', 'global batch 7 is not a multiple of dp ×'),
    ('plan --gpus 8 --pp 3', 'tp × pp = 3 does not divide --gpus 8; ch'),
    ('plan --gpus 8 --pp 64', 'tp × pp = 64 does not divide --gpus 8; c'),
    ('plan --gpus 8.5', "argument --gpus: invalid int value: '8.5"),
    ("plan --json ''", 'the --json file path is empty; give a fi'),
    ('plan --json /proc/p.json', 'cannot write --json file /proc/p.json: /'),
    ('plan --json {dir}', 'is a directory; give a file name inside'),
    ('plan --micro-batches 0', '--micro-batches 0: must be at least 1'),
    ("plan --model ''", "unknown model ''; choose one of gpt-tiny"),
    ('plan --price-per-gpu-hour inf --tokens 2T', '--price-per-gpu-hour inf: must be a fini'),
    ("plan --profile ''", "unknown hardware profile ''; available:"),
    ('plan --profile {dir}', 'no hardware profile file at'),
    ('plan --profile {file}', "Expected '=' after a key in a key/value"),
    ('plan --schedule interleaved --v 1 --pp 2', 'the interleaved schedule needs pp >= 2 a'),
    ('plan --search --global-batch 0', '--global-batch 0: must be at least 1'),
    ('plan --search --gpus -1', '--gpus -1: must be at least 1'),
    ('plan --search --top x', "argument --top: invalid int value: 'x' ("),
    ("plan --stage-layers '' --pp 2", "--stage-layers '': give whole numbers se"),
    ('plan --stage-layers -1,33 --pp 2', 'argument --stage-layers: expected one ar'),
    ('plan --stage-layers 10,22 --pp 3', 'tp × pp = 3 does not divide --gpus 8; ch'),
    ('plan --stage-layers 16,16', 'stage_layers=(16, 16) must list pp=1 pos'),
    ('plan --stage-layers a,b --pp 2', "--stage-layers 'a,b': give whole numbers"),
    ("plan --tokens ''", '--tokens : not a token count; write e.g.'),
    ('plan --tokens -2T', 'argument --tokens: expected one argument'),
    ('plan --tokens 1..2', '--tokens 1..2: not a token count; write'),
    ('plan --tokens 1e-5', '--tokens 1e-5: must be a finite number o'),
    ('plan --tokens 2TT', '--tokens 2TT: not a token count; write e'),
    ('plan --tp abc', "argument --tp: invalid int value: 'abc'"),
    ('plan --v 3 --pp 2', 'v=3 model chunks per rank needs schedule'),
    ('plan --zero -1', 'argument --zero: invalid choice: -1 (cho'),
    ('plan --zero x', "argument --zero: invalid int value: 'x'"),
    ('plan nonsense', 'unrecognized arguments: nonsense (see `m'),
    ('run --debug', 'the following arguments are required: st'),
    ("run ddp --checkpoint-dir ''", '--checkpoint-dir is empty; give a folder'),
    ('run ddp --checkpoint-dir /proc/ck', 'cannot write checkpoint folder (checkpoi'),
    ('run ddp --checkpoint-dir {dir} --resume', '(--checkpoint-dir) first.'),
    ('run ddp --checkpoint-dir {file}/ck', 'is a file, not a directory.'),
    ('run ddp --checkpointing half', 'argument --checkpointing: invalid choice'),
    ('run ddp --collective-timeout -1', 'argument --collective-timeout: -1 must b'),
    ('run ddp --collective-timeout 0', 'argument --collective-timeout: 0 must be'),
    ('run ddp --collective-timeout abc', "argument --collective-timeout: 'abc' is"),
    ('run ddp --collective-timeout inf', 'argument --collective-timeout: inf must'),
    ('run ddp --collective-timeout nan', 'argument --collective-timeout: nan must'),
    ('run ddp --dp 1.5', "argument --dp: '1.5' is not a whole numb"),
    ('run ddp --dp 2 --tp 2 --workers 2', 'dp*tp*pp = 2*2*1 = 4, but there are 2 wo'),
    ('run ddp --dtype bf16 --optimizer sgd -o nope=1', "unknown option 'nope' for strategy 'ddp'"),
    ('run ddp --dtype fp64', "argument --dtype: invalid choice: 'fp64'"),
    ("run ddp --emulate '  '", '--emulate needs a hardware profile name,'),
    ("run ddp --emulate ''", '--emulate needs a hardware profile name,'),
    ('run ddp --emulate {dir}', 'no hardware profile file at'),
    ('run ddp --emulate {file}', "Expected '=' after a key in a key/value"),
    # real-scale models run outside shape mode (issue 29) after the cost model's memory check
    ('run ddp --emulate h100-nvlink --model llama-7b', "needs 532.9 GB in this machine's RAM"),
    ('run ddp --emulate h100-nvlink --shape --model nope', "model='nope' is not one of ('gpt-tiny',"),
    ('run ddp --emulate h100-nvlink --workers 0', 'argument --workers: 0 must be at least 1'),
    ('run ddp --emulate h100-nvlink -o rank_profiles=h100-nvlink', 'rank_profiles names 1 profiles for 2 ran'),
    ('run ddp --emulate h100-nvlink -o rank_profiles=nope,nope', "unknown hardware profile 'nope'; availab"),
    ('run ddp --global-batch 0x10', "argument --global-batch: '0x10' is not a"),
    ('run ddp --global-batch 3', 'global_batch=3 does not split into 2 dat'),
    ("run ddp --json ''", 'the --json file path is empty; give a fi'),
    ('run ddp --json .', '--json file . is a directory; give a fil'),
    ('run ddp --json /sys/x.json', 'cannot write --json file /sys/x.json: /s'),
    ('run ddp --json {dir}', 'is a directory; give a file name inside'),
    ('run ddp --keep-checkpoints -1', 'argument --keep-checkpoints: -1 must be'),
    ('run ddp --keep-checkpoints 0', 'argument --keep-checkpoints: 0 must be a'),
    ('run ddp --keep-checkpoints 2', '--keep-checkpoints 2 needs --checkpoint-'),
    ('run ddp --keep-checkpoints x', "argument --keep-checkpoints: 'x' is not"),
    ("run ddp --lr ''", "argument --lr: invalid float value: '' ("),
    ('run ddp --lr 0x10', "argument --lr: invalid float value: '0x1"),
    ('run ddp --lr 1e400', 'lr=inf: the learning rate must be a fini'),
    ('run ddp --max-restarts 1 --checkpoint-dir /proc/ck', 'cannot write checkpoint folder (checkpoi'),
    ('run ddp --max-restarts 99999999999', 'argument --max-restarts: 99999999999 is'),
    ('run ddp --micro-batches 100', 'global_batch=8 does not split into 2 dat'),
    ('run ddp --model GPT-TINY', "model='GPT-TINY' is not one of ('gpt-tin"),
    ('run ddp --model gpt-tiny,gpt-small', "model='gpt-tiny,gpt-small' is not one of"),
    ('run ddp --model llama-7b', "needs 532.9 GB in this machine's RAM"),
    ('run ddp --optimizer ADAMW', "argument --optimizer: invalid choice: 'A"),
    ("run ddp --profile-torch ''", 'the torch.profiler folder (--profile-tor'),
    ('run ddp --profile-torch /proc/p', 'cannot write torch.profiler folder (--pr'),
    ("run ddp --save-weights ''", 'the weights (--save-weights) path is emp'),
    ('run ddp --save-weights /proc/w.safetensors', 'cannot write weights (--save-weights) /p'),
    ('run ddp --schedule 1f1b', "schedule='1f1b' is a pipeline schedule:"),
    ('run ddp --shape', '--shape runs on the virtual clock only:'),
    ('run ddp --shape --emulate h100-nvlink --checkpoint-dir {dir}/ckx', 'shape mode has no weights to checkpoint'),
    ('run ddp --sp', 'sequence parallelism (sp) splits the ten'),
    ('run ddp --steps -0', 'argument --steps: 0 must be at least 1 ('),
    ('run ddp --steps 1.0', "argument --steps: '1.0' is not a whole n"),
    ('run ddp --steps 1e3', "argument --steps: '1e3' is not a whole n"),
    ('run ddp --timeout 1 --collective-timeout x', "argument --collective-timeout: 'x' is no"),
    ('run ddp --timeout 1e400', 'argument --timeout: 1e400 must be betwe'),
    ('run ddp --tp 0', 'argument --tp: 0 must be at least 1 (see'),
    ('run ddp --tp 2', 'ddp cannot be combined with tensor paral'),
    ('run ddp --tp x', "argument --tp: 'x' is not a whole number"),
    ("run ddp --trace ''", 'the trace (--trace) path is empty; give'),
    ('run ddp --trace /proc/t.json', 'cannot write trace (--trace) /proc/t.jso'),
    ('run ddp --v 2', 'v=2 (model chunks per pipeline rank) nee'),
    ("run ddp --workers ''", "argument --workers: '' is not a whole nu"),
    ('run ddp --workers ٣', 'global_batch=8 does not split into 3 dat'),
    ("run ddp -o 'checkpoint_dir=1'", 'option checkpoint_dir=1 (ddp): must be a'),
    ("run ddp -o 'keep_checkpoints=2'", '--keep-checkpoints 2 needs --checkpoint-'),
    ("run ddp -o 'straggler=[1,2]'", 'option straggler=[1, 2] (ddp): must be a'),
    ('run ddp -o \'straggler={"factor": 0.5}\'', 'straggler={\'factor\': 0.5}: give {"rank":'),
    ('run ddp -o \'straggler={"rank": -1}\'', 'straggler={\'rank\': -1}: give {"rank": R,'),
    ('run ddp -o \'straggler={"rank": 0, "factor": "fast"}\'', "straggler={'rank': 0, 'factor': 'fast'}:"),
    ('run ddp -o \'straggler={"rank": 0, "speed": 2}\'', "straggler={'rank': 0, 'speed': 2} (unkno"),
    ('run ddp -o base_batch=0', 'option base_batch=0 (ddp): must be at le'),
    ('run ddp -o batch_split=1,2', "batch_split='1,2' adds up to 3 rows; glo"),
    ('run ddp -o batch_split=2,6,0', "batch_split='2,6,0': every rank needs at"),
    ('run ddp -o batch_split=a,b', "batch_split='a,b': give rows per data-pa"),
    ('run ddp -o checkpoint_dir=/proc/ck', 'cannot write checkpoint folder (checkpoi'),
    ('run ddp -o checkpoint_every=-1', '--checkpoint-every -1 needs --checkpoint'),
    ('run ddp -o drop_slowest=-1', 'option drop_slowest=-1 (ddp): must be at'),
    ('run ddp -o drop_slowest=5', 'drop_slowest runs with dp-naive (a sync'),
    ('run ddp -o keep_checkpoints=0', 'option keep_checkpoints=0 (ddp): must be'),
    ('run ddp -o loader_delay_s=-1', 'option loader_delay_s=-1 (ddp): must be'),
    ('run ddp -o loader_delay_s=nan', "option loader_delay_s='nan' (ddp): must"),
    ('run ddp -o lr_scaling=cubic', "option lr_scaling='cubic' (ddp): choose"),
    ('run ddp -o max_restarts=1', "unknown option 'max_restarts' for strate"),
    ('run ddp -o prefetch=-1', 'option prefetch=-1 (ddp): must be at lea'),
    ('run ddp -o prefetch=x', "option prefetch='x' (ddp): must be an in"),
    ('run ddp -o rank_profiles=h100-nvlink', "rank_profiles prices each rank's compute"),
    ('run ddp -o resume=true', 'resume=true needs checkpoint_dir=... (--'),
    ('run ddp -o resume=yes', "option resume='yes' (ddp): use true or f"),
    ('run ddp -o show_idle=yes', "option show_idle='yes' (ddp): use true o"),
    ('run ddp -o straggler=3', 'option straggler=3 (ddp): must be an obj'),
    ('run ddp -o warmup_steps=-1', 'option warmup_steps=-1 (ddp): must be at'),
    ('run dp-bucketed -o bucket_mb=inf', "option bucket_mb='inf' (dp-bucketed): mu"),
    ('run dp-int8 -o nope=1', "unknown option 'nope' for strategy 'dp-i"),
    ('run dp-powersgd -o rank=0', 'option rank=0 (dp-powersgd): must be at'),
    ('run dp-topk -o ratio=0', 'option ratio=0 (dp-topk): must be more t'),
    ('run dp-topk -o ratio=2', 'option ratio=2 (dp-topk): must be at mos'),
    ('run fsdp2 --tp 3', 'fsdp2 cannot be combined with tensor par'),
    ('run hybrid --tp 2 --pp 2 --workers 6', 'dp*tp*pp = 1*2*2 = 4, but there are 6 wo'),
    ('run local-sgd -o sync_every=0', "unknown option 'sync_every' for strategy"),
    ('run pp-gpipe --pp 3', 'gpt-tiny has 4 transformer blocks, which'),
    ('run pp-interleaved --v 1', 'the interleaved schedule needs pp >= 2 a'),
    ('run ps-async --workers 2 -o staleness=1', "options['staleness']=1: with 1 workers t"),
    ('run ps-async -o staleness=-1', 'option staleness=-1 (ps-async): must be'),
    ('run ps-async -o staleness=5', "options['staleness']=5: with 2 workers t"),
    ('run ps-sync --global-batch 7', 'global_batch=7 does not split into 2 dat'),
    ('run ps-sync --micro-batches 2', 'the parameter server takes one batch per'),
    ('run ps-sync --workers 1', "strategy 'ps-sync' needs at least 2 work"),
    ('run single --pp 2', 'single cannot be combined with pipeline'),
    ('run single --tp 2', 'single cannot be combined with tensor pa'),
    ('run single --workers 2', 'single runs on one replica; it cannot ta'),
    ('run tp --tp 2 --pp 2 --workers 2', 'dp*tp*pp = 1*2*2 = 4, but there are 2 wo'),
    ('run tp --tp 3', 'tp=3 does not divide n_head=4; choose tp'),
    ('run tp --workers 3', 'tp=3 does not divide n_head=4; choose tp'),
    ('run zero1 --micro-batches 3 --global-batch 8', 'global_batch=8 does not split into 2 dat'),
    ('run zero3 --pp 2', 'zero3 cannot be combined with pipeline p'),
    ("tour --emulate ''", "unknown hardware profile ''; available:"),
    ('tour --emulate {file}', "Expected '=' after a key in a key/value"),
    ('tour --only single dpp', '--only dpp: not a registered strategy; c'),
    ('tour --out /proc/r', 'cannot write tour report folder (--out)'),
    ('tour --steps -1', 'argument --steps: -1 must be at least 1'),
    ('tour --steps 99999999999999', 'argument --steps: 99999999999999 is too'),
    ('tour --steps x', "argument --steps: 'x' is not a whole num"),
    ('tour --update-readme {file}', 'has no <!-- results:start --> … <!-- res'),
    ('tour --workers x', "argument --workers: 'x' is not a whole n"),
]


def test_the_table_is_big_enough():
    assert len(CLI_CASES) + len(API_CASES) >= 60 and len(CLI_CASES) >= 250
    assert len({argv for argv, _ in CLI_CASES}) == len(CLI_CASES), "a case is listed twice"


def classes() -> dict[str, int]:
    """Inputs tried per class (subcommand), for the issue's note."""
    out = {}
    for argv, _ in CLI_CASES:
        words = shlex.split(argv)
        key = next((w for w in words if not w.startswith("-")), "(global)")
        out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.parametrize("argv, cause", CLI_CASES, ids=[c[0] or "(none)" for c in CLI_CASES])
def test_a_bad_cli_input_is_one_line_exit_2_nothing_launched(argv, cause, files, no_launch, capsys):
    args = [_fill(a, files) for a in shlex.split(argv)]
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


def _fill(arg: str, files: dict) -> str:
    """`arg` with its {placeholders} of `files` filled (JSON braces in -o values left alone)."""
    for key, path in files.items():
        arg = arg.replace("{" + key + "}", path)
    return arg


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
    # issue 25: checked before launch, no longer in a rank
    ("run", dict(strategy="ddp", global_batch=10**11), ValueError, "needs at least"),
    ("run", dict(strategy="ddp", model="mlp-tiny", global_batch=10**10), ValueError, "needs at least"),
    ("run", dict(strategy="ddp", workers=100_000, global_batch=100_000), ValueError, "100000 workers need"),
    ("run", dict(strategy="ddp", options={"straggler": {"rank": 5, "factor": 3}}), ValueError,
     "this run has 2 rank(s)"),
    ("run", dict(strategy="ddp", options={"checkpoint_every": 2}), ValueError, "needs checkpoint_dir"),
    ("run", dict(strategy="ddp", trace_path=""), ValueError, "path is empty"),
    ("run", dict(strategy="ddp", layout={"schedule": "1f1b"}), ValueError, "needs pp > 1"),
    ("run", dict(strategy="ddp", options={"checkpoint_dir": "{file}/ck"}), ValueError, "is a file"),
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

    kwargs = {k: (_fill(v, files) if isinstance(v, str) else
                  {kk: _fill(vv, files) if isinstance(vv, str) else vv for kk, vv in v.items()}
                  if isinstance(v, dict) else v) for k, v in kwargs.items()}
    call = {"run": lambda kw: mgpukit.run(kw.pop("strategy"), **kw),
            "launch": lambda kw: mgpukit.launch(_noop, kw.pop("world_size"), **kw),
            "load_profile": lambda kw: load_profile(kw["name"])}[fn]
    with pytest.raises(error) as info:
        call(dict(kwargs))
    assert cause in str(info.value)
