"""Checkpoints you can trust (`mgpukit/training/checkpoint_files.py`): a checksum per file,
verified before a resume launches; one run per folder; the newest K kept; a save that fails on
a full disk or a file-size limit leaves the previous checkpoint and no partial folder; every
check of a resume — there, whole, this model, this optimizer, steps left — made before launch.

Method: one real 2-worker ddp run writes checkpoints once (module fixture); each test damages a
copy of its folder and asks the CLI (in this process, the launcher replaced by a tripwire) or
the API to resume from it: one line, exit 2, nothing launched. The full-disk cases are real:
a child run under RLIMIT_FSIZE (`ulimit -f`), and a 4 MiB tmpfs where mount(8) is allowed."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import mgpukit
from mgpukit.cli import main
from mgpukit.runtime import launcher
from mgpukit.training.checkpoint_files import (CheckpointError, FolderLock, has_checkpoint, latest, prune,
                                               read_manifest, verify)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 4


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real checkpoint folder: ddp on 2 workers, gpt-tiny, SGD, saved after every step, the
    newest 2 kept."""
    root = tmp_path_factory.mktemp("saved") / "ck"
    mgpukit.run("ddp", workers=2, steps=STEPS, mode="cpu", parity=False, timeout_s=180,
                options={"checkpoint_dir": str(root), "checkpoint_every": 1, "keep_checkpoints": 2})
    return root


@pytest.fixture
def copy(saved, tmp_path):
    out = tmp_path / "ck"
    shutil.copytree(saved, out)
    return out


@pytest.fixture
def no_launch(monkeypatch):
    monkeypatch.setattr(launcher, "_run", lambda *a, **k: pytest.fail("launched although the input was bad"))


def _one_line(capsys, argv) -> str:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mgpukit: error: "), err
    assert "Traceback" not in err and "weights_only" not in err
    return lines[0]


def _resume(folder, *more):
    return ["run", "ddp", "--steps", str(STEPS + 2), "--checkpoint-dir", str(folder), "--resume",
            "--no-parity", *more]


def test_the_newest_k_are_kept_each_with_a_manifest(saved):
    assert [p.name for p in sorted(saved.glob("step-*"))] == ["step-000003", "step-000004"]
    assert latest(saved).name == "step-000004"
    manifest = verify(latest(saved))
    assert manifest["model"] == "gpt-tiny" and manifest["optimizer"] == "sgd" and manifest["step"] == STEPS
    assert {".metadata", "__0_0.distcp", "__1_0.distcp"} <= set(manifest["files"])
    assert not list(saved.glob("*.partial"))


def _flip(path, at=1000, count=1):
    data = bytearray(path.read_bytes())
    for i in range(count):
        data[at + 4 * i] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, cause", [
    (lambda f: _flip(f / "__1_0.distcp"), "__1_0.distcp does not match its checksum"),
    (lambda f: _flip(f / "__0_0.distcp", at=4000, count=16), "__0_0.distcp does not match its checksum"),
    (lambda f: _flip(f / ".metadata", at=200), ".metadata does not match its checksum"),
    (lambda f: os.truncate(f / "__0_0.distcp", 598), "__0_0.distcp has 598 bytes where"),
    (lambda f: os.truncate(f / ".metadata", 0), ".metadata has 0 bytes where"),
    (lambda f: (f / "__1_0.distcp").unlink(), "__1_0.distcp is missing"),
    (lambda f: (f / "manifest.json").unlink(), "has no manifest.json: it was never finished"),
    (lambda f: (f / "manifest.json").write_text("{"), "manifest.json is unreadable"),
], ids=["flipped-byte", "16-floats", "metadata-byte", "truncated", "empty-metadata", "missing-file",
        "no-manifest", "bad-manifest"])
def test_a_damaged_checkpoint_is_refused_on_resume_in_one_line(damage, cause, copy, capsys, no_launch):
    damage(latest(copy))
    line = _one_line(capsys, _resume(copy))
    assert cause in line and "step-000004" in line, line


def test_load_full_checks_the_checksums_too(copy):
    from mgpukit.training.checkpoint import load_full

    assert load_full(copy)["step"] == STEPS
    _flip(latest(copy) / "__0_0.distcp")
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        load_full(copy)


@pytest.mark.parametrize("more, cause", [
    (["--optimizer", "adamw"], "optimizer='sgd'; this run has optimizer='adamw'"),
    (["--model", "gpt-small"], "model='gpt-tiny'; this run has model='gpt-small'"),
    (["--model", "mlp-tiny"], "model='gpt-tiny'; this run has model='mlp-tiny'"),
], ids=["sgd-into-adamw", "another-gpt", "an-mlp"])
def test_a_checkpoint_of_another_model_or_optimizer_is_refused_before_launch(more, cause, copy, capsys,
                                                                              no_launch):
    assert cause in _one_line(capsys, _resume(copy, *more))


@pytest.mark.parametrize("steps", [STEPS - 1, STEPS])
def test_resuming_with_no_steps_left_is_refused_before_launch(steps, copy, capsys, no_launch):
    argv = _resume(copy)
    argv[argv.index("--steps") + 1] = str(steps)
    assert f"is at step {STEPS}; steps={steps} leaves nothing to run" in _one_line(capsys, argv)


def test_resume_from_an_empty_folder_is_refused_before_launch(tmp_path, capsys, no_launch):
    assert "no checkpoint to resume from" in _one_line(capsys, _resume(tmp_path))


def test_latest_naming_a_deleted_checkpoint_is_refused_naming_the_others(copy, capsys, no_launch):
    shutil.rmtree(latest(copy))
    assert "step-000003" in _one_line(capsys, _resume(copy))


def test_a_new_run_into_a_folder_with_checkpoints_is_refused(copy, capsys, no_launch):
    argv = ["run", "ddp", "--steps", "2", "--checkpoint-dir", str(copy), "--no-parity"]
    assert "already holds checkpoints" in _one_line(capsys, argv)


def test_a_second_run_on_a_folder_in_use_is_refused(tmp_path, capsys, no_launch):
    held = FolderLock(tmp_path / "ck").acquire()  # what a running `mgpukit run` holds
    try:
        argv = ["run", "ddp", "--steps", "2", "--checkpoint-dir", str(tmp_path / "ck"), "--no-parity"]
        line = _one_line(capsys, argv)
        assert "is in use by another run" in line and f"pid {os.getpid()}" in line
    finally:
        held.release()


def test_the_folder_lock_goes_with_its_holder_however_it_dies(tmp_path):
    code = (f"from mgpukit.training.checkpoint_files import FolderLock; import time; "
            f"FolderLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT})
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointError, match="in use by another run"):
            FolderLock(tmp_path).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    FolderLock(tmp_path).acquire().release()  # no stale lock to clean up


def test_prune_keeps_the_newest_k_and_never_the_current(tmp_path):
    for k in (1, 2, 3, 10):
        (tmp_path / f"step-{k:06d}").mkdir()
    (tmp_path / "step-000011.partial").mkdir()
    prune(tmp_path, 2, "step-000003")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000003", "step-000010", "step-000011.partial"]


def _limited_cli(argv, limit_bytes):
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return subprocess.run([sys.executable, "-m", "mgpukit.cli", *argv], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=300, preexec_fn=limit)


def _kept_whole(folder, step: int):
    assert latest(folder).name == f"step-{step:06d}" and verify(latest(folder))["step"] == step
    assert not list(folder.glob("*.partial")), "a partial checkpoint folder was left"


def test_a_save_past_the_file_size_limit_keeps_the_previous_checkpoint(copy):
    """Resumed from step 4 under `ulimit -f` 500 KB (each rank's file is ~1 MB): the save of
    step 5 fails; one line, exit 2, step 4 intact, no step-000005.partial."""
    proc = _limited_cli(_resume(copy, "--checkpoint-every", "1"), 500_000)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr
    assert last.startswith("mgpukit: error: cannot save checkpoint") and "step-000005" in last, proc.stderr
    assert "file-size limit" in last and "the previous checkpoint (step-000004) is intact" in last
    _kept_whole(copy, STEPS)


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs: one checkpoint of this run (~2 MB) fits, a second does not. Needs root."""
    where = tmp_path / "disk"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(small_disk, capsys):
    """Before: `unexpected pos 704 vs 598` from a rank and a step-000002.partial left behind."""
    folder = small_disk / "ck"
    argv = ["run", "ddp", "--steps", "3", "--checkpoint-every", "1", "--checkpoint-dir", str(folder),
            "--no-parity"]
    line = _one_line(capsys, argv)
    assert "cannot save checkpoint" in line and "step-000002" in line and "No space left on device" in line
    assert "the previous checkpoint (step-000001) is intact" in line
    _kept_whole(folder, 1)
    assert has_checkpoint(folder) and read_manifest(latest(folder))["step"] == 1
