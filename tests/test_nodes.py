"""Emulated runs across nodes: the virtual clock charges the network for a collective whose
ranks span nodes, as the cost model does. Method: one all-reduce of 1 GiB (charged on the
virtual clock without moving it) and a real 1 MiB all-reduce through the recorder, on 16
emulated H100s of `h100-ib` (2 nodes of 8) and on 8 (1 node); the ratio of the emulated times
must be within 5% of the cost model's ratio."""
import pytest

from mgpukit.lessons.nodes import emulated_allreduce


def test_emulated_allreduce_on_two_nodes_vs_one_matches_the_cost_models_ratio():
    two = emulated_allreduce(2**30, 16, profile="h100-ib")   # 8 per node (the profile's own)
    one = emulated_allreduce(2**30, 8, profile="h100-ib")
    assert (two["nodes"], one["nodes"]) == (2, 1)
    assert two["probe_inter_node"] and not one["probe_inter_node"]
    assert two["probe_ok"] and one["probe_ok"]  # the probe's data really was summed
    emulated = two["emulated_s"] / one["emulated_s"]
    predicted = two["predicted_s"] / one["predicted_s"]
    assert emulated == pytest.approx(predicted, rel=0.05)
    assert predicted > 1.05  # crossing the node costs something (not a ratio of 1 by accident)
    probe = (two["probe_emulated_s"] / one["probe_emulated_s"]) / (two["probe_predicted_s"] / one["probe_predicted_s"])
    assert probe == pytest.approx(1, rel=0.05)


def test_a_restarted_torchrun_attempt_resumes_from_the_checkpoint(tmp_path, monkeypatch):
    """`torchrun --max-restarts N` starts the processes again with TORCHELASTIC_RESTART_COUNT
    > 0: a run that saves checkpoints then goes on from the last one (not from step 0); the
    first attempt, or a run without a checkpoint yet, starts afresh."""
    from mgpukit.config import RunConfig
    from mgpukit.launched import resume_after_restart

    cfg = RunConfig(options={"checkpoint_dir": str(tmp_path), "checkpoint_every": 1})
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert not resume_after_restart(cfg).options.get("resume")  # nothing saved yet
    (tmp_path / "latest").write_text("step-000003\n")
    assert resume_after_restart(cfg).options["resume"] is True
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert not resume_after_restart(cfg).options.get("resume")
