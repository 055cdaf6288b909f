"""A checkpoint is data, never code, and its folder stays inside itself (issue 38:
`training/checkpoint_data.py`, `training/checkpoint_files.py`).

Method: one real 2-worker ddp run writes checkpoints once (module fixture); each test crafts or
damages a copy of its folder the way the probe did — with the SHA-256 manifest recomputed, as
whoever crafts a folder would — and asks the CLI (in this process, the launcher replaced by a
tripwire) or the in-process loader to resume from it. Every case: one line, exit 2, nothing
launched, no code run, nothing outside the folder touched."""
import io
import json
import os
import pickle
import re
import shutil

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

import mgpukit
from mgpukit.cli import main
from mgpukit.runtime import launcher
from mgpukit.training.checkpoint import _LoadPlanner, load_full
from mgpukit.training.checkpoint_data import SafeReader
from mgpukit.training.checkpoint_files import (LOCK, CheckpointError, FolderLock, latest, prune, read_manifest,
                                               steps, write_manifest)

STEPS = 4


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real checkpoint folder: ddp on 2 workers, gpt-tiny, SGD, saved after every step, the
    newest 2 kept (step-000003, step-000004)."""
    root = tmp_path_factory.mktemp("saved") / "ck"
    mgpukit.run("ddp", workers=2, steps=STEPS, mode="cpu", parity=False, timeout_s=180,
                options={"checkpoint_dir": str(root), "checkpoint_every": 1, "keep_checkpoints": 2})
    return root


@pytest.fixture
def copy(saved, tmp_path):
    out = tmp_path / "ck"
    shutil.copytree(saved, out, symlinks=True)
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
    assert "Traceback" not in err
    return lines[0]


def _resume(folder, *more):
    return ["run", "ddp", "--steps", str(STEPS + 2), "--checkpoint-dir", str(folder), "--resume",
            "--no-parity", *more]


def _rechecksum(step) -> None:
    """What a crafter does after editing a checkpoint: recompute its manifest (a checksum is
    not a signature)."""
    write_manifest(step, {k: v for k, v in read_manifest(step).items() if k not in ("format", "files")})


def _edit_manifest(step, change) -> None:
    path = step / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # what a crafted checkpoint does: call anything while unpickled
        return (os.system, (f"touch {self.marker}",))


def _declare_bytes(step, marker) -> None:
    """The probe's crafted checkpoint: `.metadata` (plain DCP classes: it passes the allow-list)
    declares the entry `step` as `BytesStorageMetadata`, stored in a new file holding a pickle
    that runs a command — DCP's default planner would `torch.load(weights_only=False)` it."""
    metadata = SafeReader(str(step)).read_metadata()
    metadata.state_dict_metadata["step"] = BytesStorageMetadata()
    payload = io.BytesIO()
    torch.save(_RunsCode(marker), payload)
    (step / "__9_0.distcp").write_bytes(payload.getvalue())
    metadata.storage_data = {k: v for k, v in metadata.storage_data.items() if k.fqn != "step"}
    metadata.storage_data[MetadataIndex("step")] = _StorageInfo("__9_0.distcp", 0, len(payload.getvalue()))
    metadata.storage_meta = None
    (step / ".metadata").write_bytes(pickle.dumps(metadata))
    _rechecksum(step)


# ---- 1. a checkpoint is data ------------------------------------------------------------------------
def test_a_crafted_bytes_entry_is_refused_before_launch_and_runs_no_code(copy, tmp_path, capsys, no_launch):
    marker = tmp_path / "code-ran"
    _declare_bytes(latest(copy), marker)
    line = _one_line(capsys, _resume(copy))
    assert "'step' as BytesStorageMetadata" in line and "refusing it" in line, line
    with pytest.raises(CheckpointError, match="BytesStorageMetadata"):
        load_full(copy)  # the in-process loader: the same gate
    assert not marker.exists(), "the crafted checkpoint ran code"
    assert not (copy / LOCK).exists()


def test_the_ranks_load_planner_refuses_bytes_before_reading_them(copy):
    """For a script that skips the pre-check (torchrun): the planner in the ranks checks what it
    is asked to read — a bytes entry is refused when planned, and never unpickled."""
    metadata = SafeReader(str(latest(copy))).read_metadata()
    metadata.state_dict_metadata["step"] = BytesStorageMetadata()
    planner = _LoadPlanner()
    planner.set_up_planner({"step": torch.tensor(0)}, metadata, True)
    with pytest.raises(CheckpointError, match="'step' is a BytesStorageMetadata"):
        planner.create_local_plan()
    with pytest.raises(CheckpointError, match="never unpickles"):
        planner.load_bytes(type("Item", (), {"dest_index": MetadataIndex("step")})(), io.BytesIO(b""))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # one process: that is the point
def test_a_refusal_inside_dcp_load_comes_out_as_one_line(copy):
    """DCP wraps what a planner raises in its CheckpointException (a BaseException carrying
    every rank's traceback); the kit raises the refusal itself: exit 2, one line, from a rank too."""
    from mgpukit.training.checkpoint import _dcp_load

    reader = SafeReader(str(latest(copy)))
    with pytest.raises(CheckpointError, match=r"'step' is a tensor of shape \(\) where this run loads a tensor of shape \(3,\)"):
        _dcp_load({"step": torch.zeros(3, dtype=torch.int64)}, reader, no_dist=True)


@pytest.mark.parametrize("path", ["../../elsewhere.distcp", "/etc/passwd", "manifest.json", "__7_0.distcp"],
                         ids=["dotdot", "absolute", "the-manifest", "unlisted"])
def test_metadata_reading_outside_the_checkpoints_files_is_refused(path, copy, capsys, no_launch):
    step = latest(copy)
    metadata = SafeReader(str(step)).read_metadata()
    index = next(k for k in metadata.storage_data if k.fqn == "model/head.lm_head.weight")
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo(path, info.offset, info.length)
    (step / ".metadata").write_bytes(pickle.dumps(metadata))
    _rechecksum(step)
    assert "which is not one of the checkpoint's files" in _one_line(capsys, _resume(copy))


# ---- 2. the folder stays inside itself ---------------------------------------------------------------
def _latest_says(text):
    return lambda ck, outside: (ck / "latest").write_text(text)


def _latest_outside(ck, outside):
    """`latest` naming a checkpoint of another folder, by `..` (the probe's `../other/step-…`)."""
    shutil.copytree(latest(ck), outside / "step-000004")
    (ck / "latest").write_text(f"../{outside.name}/step-000004\n")


def _latest_absolute(ck, outside):
    shutil.copytree(latest(ck), outside / "step-000004")
    (ck / "latest").write_text(str(outside / "step-000004") + "\n")


def _latest_a_link(ck, outside):
    (outside / "pointer").write_text("step-000004\n")
    (ck / "latest").unlink()
    (ck / "latest").symlink_to(outside / "pointer")


def _step_a_link(ck, outside):
    shutil.move(str(ck / "step-000004"), str(outside / "step-000004"))
    (ck / "step-000004").symlink_to(outside / "step-000004")


def _distcp_a_link(ck, outside):
    shutil.move(str(ck / "step-000004" / "__0_0.distcp"), str(outside / "__0_0.distcp"))
    (ck / "step-000004" / "__0_0.distcp").symlink_to(outside / "__0_0.distcp")


def _manifest_a_link(ck, outside):
    shutil.move(str(ck / "step-000004" / "manifest.json"), str(outside / "manifest.json"))
    (ck / "step-000004" / "manifest.json").symlink_to(outside / "manifest.json")


def _older_step_a_link(ck, outside):
    shutil.move(str(ck / "step-000003"), str(outside / "step-000003"))
    (ck / "step-000003").symlink_to(outside / "step-000003")


@pytest.mark.parametrize("damage, cause", [
    (_latest_outside, "not a step folder of"),
    (_latest_absolute, "not a step folder of"),
    (_latest_says("step-000004/../../x"), "not a step folder of"),
    (_latest_a_link, "latest is a symbolic link"),
    (_step_a_link, "step-000004 is a symbolic link"),
    (_distcp_a_link, "__0_0.distcp is a symbolic link"),
    (_manifest_a_link, "it is a symbolic link"),
    (_older_step_a_link, "step-000003 is a symbolic link"),
], ids=["latest-dotdot", "latest-absolute", "latest-dotdot-inside", "latest-a-link", "step-a-link",
        "distcp-a-link", "manifest-a-link", "older-step-a-link"])
def test_a_folder_reaching_outside_itself_is_refused_before_launch(damage, cause, copy, tmp_path, capsys,
                                                                   no_launch):
    outside = tmp_path / "other"
    outside.mkdir()
    damage(copy, outside)
    before = sorted(p.name for p in outside.rglob("*"))
    line = _one_line(capsys, _resume(copy, "--keep-checkpoints", "1"))
    assert cause in line, line
    assert sorted(p.name for p in outside.rglob("*")) == before  # nothing outside was touched


def test_a_new_run_into_a_folder_with_a_linked_step_is_refused(tmp_path, capsys, no_launch):
    """A new run would save `step-000002` through the link (or prune around it): refused first."""
    ck, outside = tmp_path / "ck", tmp_path / "elsewhere"
    ck.mkdir()
    outside.mkdir()
    (ck / "step-000002").symlink_to(outside)
    line = _one_line(capsys, ["run", "ddp", "--steps", "2", "--checkpoint-dir", str(ck), "--no-parity"])
    assert "step-000002 is a symbolic link" in line


def test_a_script_without_the_pre_check_is_refused_in_its_ranks_before_training(tmp_path):
    """Under torchrun/accelerate nothing checks the folder before launch: every rank's
    checkpointing set-up does, before the first step (and before any save writes through a link)."""
    from mgpukit.config import RunConfig
    from mgpukit.training.checkpoint import checkpointing

    ck, outside = tmp_path / "ck", tmp_path / "elsewhere"
    ck.mkdir()
    outside.mkdir()
    (ck / "latest").symlink_to(outside / "latest")
    cfg = RunConfig(options={"checkpoint_dir": str(ck), "checkpoint_every": 1})
    with pytest.raises(CheckpointError, match="latest is a symbolic link"):
        checkpointing(None, None, cfg, None, None)
    assert list(outside.iterdir()) == []


def test_pruning_never_follows_a_link(tmp_path):
    ck, outside = tmp_path / "ck", tmp_path / "elsewhere"
    for name in ("step-000001", "step-000003"):
        (ck / name).mkdir(parents=True)
    (outside / "keep-me").mkdir(parents=True)
    (ck / "step-000002").symlink_to(outside / "keep-me")
    assert [p.name for p in steps(ck)] == ["step-000001", "step-000003"]  # a link is no checkpoint of it
    prune(ck, 1, "step-000003")
    assert (outside / "keep-me").is_dir() and (ck / "step-000002").is_symlink()
    assert [p.name for p in steps(ck)] == ["step-000003"]


def test_a_linked_lock_never_truncates_its_target(tmp_path, capsys, no_launch):
    """The probe's data loss: a user's file linked as `.lock` became "pid 22908"."""
    ck, precious = tmp_path / "ck", tmp_path / "notes.txt"
    ck.mkdir()
    precious.write_text("a week of notes\n")
    (ck / LOCK).symlink_to(precious)
    with pytest.raises(CheckpointError, match=r"\.lock is a symbolic link"):
        FolderLock(ck).acquire()
    line = _one_line(capsys, ["run", "ddp", "--steps", "2", "--checkpoint-dir", str(ck), "--no-parity"])
    assert ".lock is a symbolic link" in line
    assert precious.read_text() == "a week of notes\n" and (ck / LOCK).is_symlink()


# ---- 3. every manifest field type-checked ------------------------------------------------------------
def _set(key, value):
    return lambda m: m.__setitem__(key, value)


def _set_file(name, value):
    return lambda m: m["files"].__setitem__(name, value)


@pytest.mark.parametrize("change, cause", [
    (_set_file("__0_0.distcp", 7), "gives __0_0.distcp as 7 where"),
    (_set_file("__0_0.distcp", {"bytes": "949678", "sha256": "0" * 64}), "gives __0_0.distcp as"),
    (lambda m: m["files"]["__0_0.distcp"].__setitem__("sha256", "no"), "gives __0_0.distcp as"),
    (lambda m: m["files"].pop(".metadata"), "does not list .metadata"),
    (_set_file("../x", {"bytes": 1, "sha256": "0" * 64}), "lists the file '../x'"),
    (_set("step", "4"), "gives step as '4' where a whole number belongs"),
    (_set("step", 0), "gives step = 0"),
    (_set("world_size", True), "gives world_size as True"),
    (_set("model", ["gpt-tiny"]), "gives model as ['gpt-tiny'] where a string belongs"),
    (_set("files", []), "gives files as []"),
    (_set("model_config", 64), "gives model_config as 64"),
], ids=["file-a-number", "bytes-a-string", "sha-not-hex", "no-metadata-entry", "file-outside", "step-a-string",
        "step-zero", "world-a-bool", "model-a-list", "files-a-list", "sizes-a-number"])
def test_every_manifest_field_is_type_checked_before_launch(change, cause, copy, capsys, no_launch):
    _edit_manifest(latest(copy), change)
    line = _one_line(capsys, _resume(copy))
    assert cause in line and "manifest.json" in line, line


def test_a_metadata_entry_removed_before_damage_is_refused_before_launch(copy, capsys, no_launch):
    """The probe's case: `.metadata` dropped from the manifest, then the file damaged."""
    step = latest(copy)
    _edit_manifest(step, lambda m: m["files"].pop(".metadata"))
    (step / ".metadata").write_bytes(b"not a pickle")
    assert "does not list .metadata" in _one_line(capsys, _resume(copy))


# ---- 4. the resume check compares the model's shape and every field the manifest records --------
@pytest.mark.parametrize("more, cause", [
    (["-o", 'model_sizes={"d_model": 32}'], "d_model=64; this run's has d_model=32"),
    (["-o", 'model_sizes={"n_layer": 2}'], "n_layer=4; this run's has n_layer=2"),
    (["-o", 'model_sizes={"n_head": 2}'], "n_head=4; this run's has n_head=2"),  # no shape changes
    (["--global-batch", "16"], "global_batch=8; this run has global_batch=16"),
], ids=["d_model", "n_layer", "n_head", "global-batch"])
def test_a_run_of_other_sizes_or_batch_is_refused_before_launch(more, cause, copy, capsys, no_launch):
    assert cause in _one_line(capsys, _resume(copy, *more))


@pytest.mark.parametrize("sizes, cause", [
    ({"d_model": 32}, r"holds model/\S+ of shape \([^)]*64[^)]*\); this run's gpt-tiny has \([^)]*32"),
    ({"n_layer": 2}, r"holds 'model/blocks\.[23]\.\S+', which this run's gpt-tiny with sgd has no place for"),
    ({"n_layer": 6}, r"lacks \['model/blocks\.4\.ln_1\.weight'"),
], ids=["narrower", "fewer-layers", "more-layers"])
def test_the_shapes_are_compared_even_without_recorded_sizes(sizes, cause, copy, capsys, no_launch):
    """A manifest without the sizes (hand-edited, or an older kit's): the `.metadata` entries
    are compared with the model built on the meta device, name by name and shape by shape."""
    _edit_manifest(latest(copy), lambda m: m.pop("model_config"))
    line = _one_line(capsys, _resume(copy, "-o", f"model_sizes={json.dumps(sizes)}"))
    assert re.search(cause, line), line


def test_another_seed_is_refused_before_launch(copy, no_launch):
    with pytest.raises(CheckpointError, match="seed=0; this run has seed=1"):
        mgpukit.run("ddp", workers=2, steps=STEPS + 2, mode="cpu", parity=False, timeout_s=60, seed=1,
                    options={"checkpoint_dir": str(copy), "resume": True})


class _Launched(Exception):
    pass


def test_another_number_of_workers_still_resumes(copy, monkeypatch):
    """The world size is the one field that may differ: a checkpoint reshards (checkpoint.py)."""
    def launch(fn, args, kwargs, spec, **kw):
        raise _Launched(spec.world_size)

    monkeypatch.setattr(launcher, "_run", launch)
    with pytest.raises(_Launched, match="1"):  # through every check, to the launch of 1 worker
        mgpukit.run("ddp", workers=1, steps=STEPS + 2, mode="cpu", parity=False, timeout_s=60,
                    options={"checkpoint_dir": str(copy), "resume": True})


# ---- 5. nothing left behind ---------------------------------------------------------------------------
def test_a_refused_resume_leaves_no_folder_and_no_lock(tmp_path, capsys, no_launch):
    ck = tmp_path / "a" / "b" / "ck"
    assert "no checkpoint to resume from" in _one_line(capsys, _resume(ck))
    assert not (tmp_path / "a").exists()


def test_a_refused_resume_of_a_folder_leaves_no_lock(copy, capsys, no_launch):
    assert "global_batch" in _one_line(capsys, _resume(copy, "--global-batch", "16"))
    assert not (copy / LOCK).exists() and (copy / "latest").is_file()
