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
    ("zero3", 2, None), ("tp", 2, None), ("fsdp2", 2, None),
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
    assert resumed["resumed_from_step"] == KILL_AFTER and whole["resumed_from_step"] is None
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


def test_resume_without_a_checkpoint_is_refused_in_one_sentence_before_launch(tmp_path, monkeypatch):
    from mgpukit.runtime import launcher

    monkeypatch.setattr(launcher, "_run", lambda *a, **k: pytest.fail("launched"))
    with pytest.raises(ValueError, match="no checkpoint to resume from"):
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
    # the file no longer matches its checksum: refused before anything reads it
    with pytest.raises(ValueError, match=r"step-000001: \.metadata (has|does not match)"):
        mgpukit.run("ddp", workers=2, steps=2, mode="cpu", parity=False, timeout_s=60,
                    options={"checkpoint_dir": str(tmp_path), "resume": True})
    # a crafter who rewrites the manifest too meets the allow-list, before launch
    from mgpukit.training.checkpoint_files import read_manifest, write_manifest

    info = {k: v for k, v in read_manifest(step).items() if k not in ("format", "files")}
    write_manifest(step, info)
    with pytest.raises(ValueError, match="refusing to load it"):
        mgpukit.run("ddp", workers=2, steps=2, mode="cpu", parity=False, timeout_s=60,
                    options={"checkpoint_dir": str(tmp_path), "resume": True})
    assert not marker.exists(), "the crafted checkpoint ran code"


def _rank_1_dies_once_after_step_2(tmp_path, monkeypatch):
    """Rank 1 is SIGKILLed right after the checkpoint of step 2 — the first time only (the
    returned marker file says it died)."""
    marker = tmp_path / "died-once"
    real = ckpt_mod.save_checkpoint

    def die_once(root, next_step, ctx, *a, **k):
        out = real(root, next_step, ctx, *a, **k)
        if next_step == 2 and ctx.rank == 1 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    monkeypatch.setattr(ckpt_mod, "save_checkpoint", die_once)
    return marker


def test_a_worker_that_fails_once_is_restarted_from_the_checkpoint_with_parity(tmp_path, monkeypatch):
    """max_restarts=1: rank 1 dies (SIGKILL) after the checkpoint of step 2, once; the run goes
    on from there, passes parity against the single-process reference, and says it restarted."""
    marker = _rank_1_dies_once_after_step_2(tmp_path, monkeypatch)
    rec = mgpukit.run("ddp", workers=2, steps=5, mode="cpu", max_restarts=1, timeout_s=180,
                      options={"checkpoint_dir": str(tmp_path / "ck"), "checkpoint_every": 1})
    assert marker.exists()
    assert len(rec["restarts"]) == 1 and rec["restarts"][0]["rank"] == 1
    assert "SIGKILL" in rec["restarts"][0]["error"]
    assert rec["parity"]["ok"], rec["parity"]
    assert len(rec["losses"]) == 5 and len(rec["step_time_s"]) == 3


# ---- resharding: a checkpoint saved on 4 workers loads on 2, and into one process ------------
def _load_and_save_again(name, cfg, src, dst):
    """In every rank: the strategy's parts and optimizer, the checkpoint under `src` loaded into
    them, then saved again under `dst` (what a resumed run holds before its first step)."""
    from mgpukit import strategies
    from mgpukit.measure.recorder import Recorder
    from mgpukit.parallelize import parallelize
    from mgpukit.runtime.context import current
    from mgpukit.training.building import build_model, build_optimizer

    ctx = current()
    torch.manual_seed(cfg.seed)
    rec = Recorder(ctx)
    parts = parallelize(build_model(cfg), cfg, ctx, rec, strategies.get(name))
    optimizer = build_optimizer(cfg, parts.params)
    logs = []
    step = ckpt_mod.load_checkpoint(src, ctx, rec, parts, optimizer, logs=logs)
    ckpt_mod.save_checkpoint(dst, step, ctx, rec, parts, optimizer, logs=logs)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("saved, loaded", [("zero3", "zero3"), ("zero3", "ddp"), ("fsdp2", "fsdp2"),
                                           ("zero1", "zero2"), ("ddp", "fsdp2"), ("tp", "tp")])
def test_a_checkpoint_of_4_workers_loads_on_2_and_in_one_process_unchanged(saved, loaded, tmp_path):
    """AdamW (moments and a step count per parameter), 3 steps on 4 workers, checkpointed: the
    full tensors read back in one process are the run's final weights exactly; loaded by 2
    workers (another strategy too) and saved again they are the same tensors, weights and
    optimizer state; loaded into the single-process model and optimizer, the same again."""
    from mgpukit.experiment import load_weights
    from mgpukit.prepare import prepare
    from mgpukit.runtime.launcher import launch
    from mgpukit.training.building import build_model, build_optimizer

    common = dict(mode="cpu", parity=False, timeout_s=180, optimizer="adamw")
    mgpukit.run(saved, workers=4, steps=3, options={"checkpoint_dir": str(tmp_path / "at4")},
                weights_path=tmp_path / "w.safetensors", **common)
    at4 = ckpt_mod.load_full(tmp_path / "at4")
    assert at4["step"] == 3
    assert _equal(at4["model"], load_weights(tmp_path / "w.safetensors"))
    assert at4["optim"].keys() == at4["model"].keys()
    assert all(v.keys() == {"exp_avg", "exp_avg_sq", "step"} for v in at4["optim"].values())

    p = prepare(loaded, workers=2, mode="cpu", optimizer="adamw", steps=3)
    launch(_load_and_save_again, p.workers, p.strategy.name, p.cfg, tmp_path / "at4",
           tmp_path / "at2", mode="cpu", dims=p.dims, layout=p.layout, timeout_s=120, echo=False)
    at2 = ckpt_mod.load_full(tmp_path / "at2")
    assert at2["step"] == 3 and _equal(at2["model"], at4["model"])
    assert at2["optim"].keys() == at4["optim"].keys()
    assert all(_equal(at2["optim"][n], at4["optim"][n]) for n in at4["optim"])

    model = build_model(p.cfg)
    optimizer = build_optimizer(p.cfg, model.parameters())
    assert ckpt_mod.load_into(tmp_path / "at4", model, optimizer) == 3
    assert _equal({n: q.detach() for n, q in model.named_parameters()}, at4["model"])
    assert all(_equal(optimizer.state[q], at4["optim"][n]) for n, q in model.named_parameters())


def test_a_run_resumed_on_2_workers_from_4_goes_on_with_parity(tmp_path):
    """zero3 checkpointed at step 3 on 4 workers, resumed on 2: the same global batches from
    step 3 on (the data position is the step), the first 3 logged losses carried over, and
    the whole run passes parity against the single-process reference."""
    common = dict(mode="cpu", timeout_s=180)
    opts = {"checkpoint_dir": str(tmp_path)}
    first = mgpukit.run("zero3", workers=4, steps=KILL_AFTER, parity=False, options=opts, **common)
    rec = mgpukit.run("zero3", workers=2, steps=STEPS, options={**opts, "resume": True}, **common)
    assert rec["parity"]["ok"], rec["parity"]
    assert len(rec["step_time_s"]) == STEPS - KILL_AFTER and len(rec["losses"]) == STEPS
    assert rec["losses"][:KILL_AFTER] == pytest.approx(first["losses"], rel=1e-12, abs=0)
    assert rec["resumed_from_step"] == KILL_AFTER


def test_the_cli_restarts_a_failed_run_from_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    """`mgpukit run --max-restarts 1 --checkpoint-dir D`: rank 1 dies once after the checkpoint of
    step 2; the run goes on from there, passes parity, and says so (stdout and the record)."""
    from mgpukit.cli import main
    from mgpukit.measure.record import load_record

    _rank_1_dies_once_after_step_2(tmp_path, monkeypatch)
    code = main(["run", "ddp", "--workers", "2", "--steps", "4", "--mode", "cpu", "--max-restarts", "1",
                 "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "1",
                 "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "restarted after rank 1 failed" in out and "resumed from the checkpoint of step 2" in out
    rec = load_record(tmp_path / "r.json")
    assert len(rec["restarts"]) == 1 and rec["resumed_from_step"] == 2 and rec["parity"]["ok"]
