"""Checkpoint and resume through torch.distributed.checkpoint: a run SIGKILLed after step k and
resumed from its checkpoint gives losses bitwise identical to the uninterrupted run from step
k+1 on (cpu mode), and the same final weights; a crash while saving leaves the previous
checkpoint loadable.

Method: real workers. The uninterrupted run is `mgpukit.run`; the interrupted one is the same
run with `checkpoint_dir` / `checkpoint_every=1` whose rank 1 SIGKILLs itself right after the
checkpoint of step k was written (an `os.kill` patched into the save function in the workers,
which are forked from this process); the resumed run is `mgpukit.run(..., resume=True)`."""
import os
import signal

import pytest
import torch

import mgpukit
from mgpukit.training import checkpoint as ckpt_mod

STEPS, KILL_AFTER = 6, 3  # steps 0..2 done and saved, then the kill


def _kill_after_saving(real):
    def save(root, next_step, ctx, *a, **k):
        out = real(root, next_step, ctx, *a, **k)
        if next_step == KILL_AFTER and ctx.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return save


@pytest.mark.parametrize("strategy, workers, layout", [
    ("ddp", 2, None), ("dp-bucketed", 2, None), ("pp-1f1b", 2, {"pp": 2}),
])
def test_killed_and_resumed_run_matches_the_uninterrupted_one_bitwise(strategy, workers, layout,
                                                                       tmp_path, monkeypatch):
    common = dict(workers=workers, steps=STEPS, mode="cpu", layout=layout, parity=False,
                  timeout_s=180)
    whole = mgpukit.run(strategy, **common)
    options = {"checkpoint_dir": str(tmp_path), "checkpoint_every": 1}
    monkeypatch.setattr(ckpt_mod, "save_checkpoint", _kill_after_saving(ckpt_mod.save_checkpoint))
    with pytest.raises(mgpukit.WorkerError, match="SIGKILL"):
        mgpukit.run(strategy, **common, options=options)
    monkeypatch.undo()
    assert (tmp_path / "latest").read_text().strip() == f"step-{KILL_AFTER:06d}"
    resumed = mgpukit.run(strategy, **common, options={**options, "resume": True})
    assert len(resumed["step_time_s"]) == STEPS - KILL_AFTER  # it really ran only the rest
    # bitwise (== on floats); steps 0..k-1 come back from the checkpoint, k.. are recomputed
    assert resumed["losses"] == whole["losses"]
    assert resumed["grad_norms"] == whole["grad_norms"]


def test_resumed_weights_equal_the_uninterrupted_runs(tmp_path):
    from mgpukit.experiment import load_weights

    common = dict(workers=2, mode="cpu", parity=False, timeout_s=180)
    mgpukit.run("ddp", steps=STEPS, weights_path=tmp_path / "whole.safetensors", **common)
    opts = {"checkpoint_dir": str(tmp_path / "ck")}
    mgpukit.run("ddp", steps=KILL_AFTER, options=opts, **common)  # saves after its last step
    mgpukit.run("ddp", steps=STEPS, options={**opts, "resume": True},
                weights_path=tmp_path / "resumed.safetensors", **common)
    whole, resumed = (load_weights(tmp_path / f"{n}.safetensors") for n in ("whole", "resumed"))
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """The second save dies after writing its files but before the rename: `latest` still names
    the first, which loads."""
    opts = {"checkpoint_dir": str(tmp_path), "checkpoint_every": 1}
    real_replace = os.replace

    def crash_on_second(src, dst):
        if str(src).endswith("step-000002.partial"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst)
    monkeypatch.setattr(ckpt_mod.os, "replace", crash_on_second)
    with pytest.raises(mgpukit.WorkerError):
        mgpukit.run("ddp", workers=2, steps=4, mode="cpu", parity=False, options=opts, timeout_s=120)
    monkeypatch.undo()
    assert (tmp_path / "latest").read_text().strip() == "step-000001"
    assert (tmp_path / "step-000002.partial").exists() and not (tmp_path / "step-000002").exists()
    rec = mgpukit.run("ddp", workers=2, steps=4, mode="cpu", parity=False, timeout_s=120,
                      options={**opts, "resume": True})
    assert len(rec["step_time_s"]) == 3 and len(rec["losses"]) == 4  # ran 1..3, logged 0..3


def test_resume_without_a_checkpoint_is_refused_in_one_sentence(tmp_path):
    with pytest.raises(mgpukit.WorkerError, match="no checkpoint to resume from"):
        mgpukit.run("ddp", workers=2, steps=2, mode="cpu", parity=False, timeout_s=60,
                    options={"checkpoint_dir": str(tmp_path), "resume": True})


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # what a crafted checkpoint does: call anything while unpickling
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_checkpoint_is_refused_without_running_its_code(tmp_path):
    import pickle

    from mgpukit.training.checkpoint import SafeReader

    mgpukit.run("ddp", workers=2, steps=1, mode="cpu", parity=False, timeout_s=60,
                options={"checkpoint_dir": str(tmp_path)})
    step = tmp_path / "step-000001"
    assert SafeReader(str(step)).read_metadata().state_dict_metadata  # the real one loads
    marker = tmp_path / "code-ran"
    (step / ".metadata").write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(ValueError, match="posix.system|os.system"):
        SafeReader(str(step)).read_metadata()
    with pytest.raises(mgpukit.WorkerError, match="refusing to load it"):
        mgpukit.run("ddp", workers=2, steps=2, mode="cpu", parity=False, timeout_s=60,
                    options={"checkpoint_dir": str(tmp_path), "resume": True})
    assert not marker.exists(), "the crafted checkpoint ran code"


def test_a_worker_that_fails_once_is_restarted_from_the_checkpoint_with_parity(tmp_path, monkeypatch):
    """max_restarts=1: rank 1 dies (SIGKILL) after the checkpoint of step 2, once; the run goes
    on from there, passes parity against the single-process reference, and says it restarted."""
    marker = tmp_path / "died-once"
    real = ckpt_mod.save_checkpoint

    def die_once(root, next_step, ctx, *a, **k):
        out = real(root, next_step, ctx, *a, **k)
        if next_step == 2 and ctx.rank == 1 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    monkeypatch.setattr(ckpt_mod, "save_checkpoint", die_once)
    rec = mgpukit.run("ddp", workers=2, steps=5, mode="cpu", max_restarts=1, timeout_s=180,
                      options={"checkpoint_dir": str(tmp_path / "ck"), "checkpoint_every": 1})
    assert marker.exists()
    assert len(rec["restarts"]) == 1 and rec["restarts"][0]["rank"] == 1
    assert "SIGKILL" in rec["restarts"][0]["error"]
    assert rec["parity"]["ok"], rec["parity"]
    assert len(rec["losses"]) == 5 and len(rec["step_time_s"]) == 3
