"""Expert parallelism and the MoE GPT: parity with one process holding every expert, the
all-to-all bytes against the cost model, routing that does not depend on how sequences are
spread over ranks, dropped tokens and the auxiliary loss, refusals before launch."""
import pytest
import torch

from mgpukit.costmodel.cp_ep import dispatch_bytes, expert_capacity
from mgpukit.experiment import run
from mgpukit.models import MoEConfig, MoEGPT, gpt_moe
from mgpukit.prepare import prepare
from mgpukit.strategies.expert_parallel import comm


@pytest.mark.parametrize("workers, layout", [(2, {}), (4, {}), (4, {"dp": 2, "ep": 2})])
def test_ep_matches_one_process_holding_every_expert(workers, layout):
    """Numerical parity (loss, gradient norm, every weight — experts gathered — after each
    step) against the single-process MoE GPT on the same global batches, fp32 defaults."""
    rec = run("ep", workers=workers, steps=2, layout=layout)
    assert rec["config"]["model"] == "gpt-moe" and "ep's default" in rec["model_note"]
    assert rec["parity"]["ok"] and rec["parity"]["weights_checked"], rec["parity"]
    assert rec["layout"]["ep"] * rec["layout"]["dp"] == workers


def test_all_to_all_bytes_and_counts_per_step_match_the_cost_model():
    rec = run("ep", workers=4, steps=2, layout={"dp": 2, "ep": 2}, parity=False)
    cfg, t = gpt_moe(), rec["theory"]
    D = dispatch_bytes(rows=rec["layout"]["micro_batch"], seq_len=cfg.seq_len, d_model=cfg.d_model,
                       n_expert=8, top_k=2, capacity_factor=1.25)
    assert D == 8 * 2 * expert_capacity(64, 8, 2, 1.25) * 64 * 4  # E·b·C·h·e
    assert t["ep_bytes_per_step"] == 4 * cfg.n_layer * D / 2  # 4 all-to-alls per layer, (p-1)/p each
    for comm_ in rec["comm"].values():
        assert comm_["collectives"]["all_to_all"] == 2 * 4 * cfg.n_layer  # two steps
        assert comm_["by_axis"]["ep"] == 2 * t["ep_bytes_per_step"]
        assert comm_["by_axis"]["dp"] == 2 * t["dp_bytes_per_step"]  # dense weights, every data rank
        assert comm_["by_axis"]["dp_outer"] == 2 * t["expert_dp_bytes_per_step"]  # an expert's copies
    moe = rec["extra"]["0"]["moe"]
    assert moe["routed"] == 2 * cfg.n_layer * 2 * 64 * 2  # steps × layers × rows × T × top-k
    assert len(moe["imbalance"]) == cfg.n_layer and min(moe["imbalance"]) >= 1.0


def test_a_backward_without_the_reverse_all_to_all_is_caught(monkeypatch):
    """The test of the test: gradients handed back unmoved (to the wrong experts' tokens)."""
    monkeypatch.setattr(comm._AllToAll, "backward", staticmethod(lambda ctx, grad: (grad, None)))
    rec = run("ep", workers=2, steps=1)
    assert not rec["parity"]["ok"]


def test_routing_and_dropping_depend_only_on_the_sequence():
    """Capacity is per sequence (GShard's groups): a batch gives each sequence the output it
    gets alone, so splitting sequences over ranks routes exactly as one process does."""
    model = MoEGPT(gpt_moe(capacity_factor=0.5))
    idx = torch.randint(0, model.cfg.vocab_size, (3, model.cfg.seq_len), generator=torch.Generator().manual_seed(0))
    together = model(idx)
    alone = torch.cat([model(idx[i:i + 1]) for i in range(3)])
    torch.testing.assert_close(together, alone)
    dropped = sum(float(b.mlp.dropped) for b in model.blocks)
    assert dropped > 0  # capacity 0.5·k·T/E slots cannot hold k·T assignments


def test_dropped_tokens_are_counted_and_pass_through_as_zero():
    cfg = gpt_moe(capacity_factor=0.25)
    mlp = MoEGPT(cfg).blocks[0].mlp
    x = torch.randn(2, cfg.seq_len, cfg.d_model)
    out = mlp(x)
    C = cfg.capacity
    assert C == expert_capacity(cfg.seq_len, 8, 2, 0.25) == 4
    assert float(mlp.load.sum()) == 2 * cfg.seq_len * 2  # every assignment routed ...
    assert float(mlp.dropped) >= 2 * cfg.seq_len * 2 - 2 * 8 * C  # ... at most E·C per sequence kept
    assert out.shape == x.shape


def test_the_auxiliary_loss_trains_the_router_without_changing_the_loss():
    cfg = gpt_moe()
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=torch.Generator().manual_seed(1))
    grads, losses = [], []
    for coef in (0.0, 1.0):
        model = MoEGPT(gpt_moe(aux_loss_coef=coef))
        logits = model(idx)
        loss = model.loss(logits, idx)
        loss.backward()
        losses.append(loss.item())
        grads.append(model.blocks[0].mlp.router.weight.grad.clone())
    assert losses[0] == losses[1]
    assert (grads[0] - grads[1]).abs().max() > 1e-6


@pytest.mark.parametrize("strategy, kw, match", [
    ("ep", {"workers": 3, "global_batch": 6}, "does not divide n_expert=8"),
    ("ep", {"workers": 4, "layout": {"tp": 2}}, "data parallelism only"),
    ("ep", {"workers": 2, "micro_batches": 2}, "one micro-batch"),
    ("ep", {"workers": 2, "model": "mlp-tiny"}, "'mlp-tiny' has no experts"),
    ("cp", {"workers": 2, "model": "gpt-moe"}, "runs on models"),
    ("tp", {"workers": 2, "model": "gpt-moe"}, "runs on models"),
    ("ddp", {"workers": 4, "layout": {"ep": 2}}, "comes with its strategy"),
])
def test_bad_expert_parallel_layouts_are_refused_before_launch(strategy, kw, match):
    with pytest.raises(ValueError, match=match):
        p = prepare(strategy, **kw)
        p.strategy.validate and p.strategy.validate(p.cfg, p.dims)


def test_ep_runs_its_own_default_model_and_says_so_and_refuses_a_dense_one_by_name(capsys):
    """Issue 36 item 4: `run ep` used to swap a named gpt-tiny for gpt-moe silently."""
    p = prepare("ep", workers=2)
    assert p.cfg.model == "gpt-moe" and "gpt-moe: ep's default" in p.model_note and "no experts" in p.model_note
    assert prepare("ep", workers=2, model="gpt-moe").model_note == ""  # asked for: nothing to say
    with pytest.raises(ValueError, match="model 'gpt-tiny' has no experts: strategy 'ep'.*drop --model"):
        prepare("ep", workers=2, model="gpt-tiny")
    from mgpukit.cli import main

    assert main(["run", "ep", "--workers", "2", "--model", "gpt-tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no experts" in err and "\n" not in err and "Traceback" not in err


def test_top_k_beyond_the_experts_is_refused():
    with pytest.raises(ValueError, match="top_k=9 must be between 1 and n_expert=8"):
        MoEConfig(**{**gpt_moe().__dict__, "top_k": 9})


def test_emulated_all_to_alls_are_charged_by_the_alpha_beta_formula():
    """On the virtual clock every all-to-all lasts `alltoall_time(D, p, link)`: (p-1)/p·D/β +
    (p-1)·α on the ep group's link (`costmodel.comm`), and parity still holds."""
    from mgpukit.costmodel.comm import alltoall_time, link_for_ranks
    from mgpukit.costmodel.hardware import load_profile

    rec = run("ep", workers=2, steps=2, mode="emulated", profile="h100-nvlink")
    assert rec["parity"]["ok"], rec["parity"]
    cfg = gpt_moe()
    D = dispatch_bytes(rows=rec["layout"]["micro_batch"], seq_len=cfg.seq_len, d_model=cfg.d_model,
                       n_expert=8, top_k=2, capacity_factor=1.25)
    want = alltoall_time(D, 2, link_for_ranks([0, 1], load_profile("h100-nvlink")))
    spans = [e["end"] - e["start"] for e in rec["timeline"] if e["kind"] == "all_to_all"]
    assert len(spans) == 2 * 2 * 4 * 4  # ranks × steps × layers × (2 forward + 2 backward)
    assert all(abs(s - want) <= 1e-12 + 1e-9 * want for s in spans), (spans[:3], want)


def test_a_mixtral_sized_layer_runs_in_shape_mode_with_the_predicted_bytes():
    """Emulated at real scale (fake tensors, labelled emulated): Mixtral 8×7B's sizes, 2 of its
    32 layers, ep 8 on 8 H100s; time and memory come back, and the bytes per axis are the cost
    model's (all-to-alls under ep, the dense gradients under dp, no expert copies at dp = ep)."""
    rec = run("ep", workers=8, mode="emulated", profile="h100-nvlink", shape=True, model="mixtral-8x7b",
              steps=1, global_batch=8, options={"model_sizes": {"n_layer": 2}})
    assert rec["mode"] == "emulated" and rec["shape"] and rec["step_time_s"][0] > 0
    assert rec["memory"]["0"]["peak"] > 0
    t = rec["theory"]
    assert rec["comm"]["0"]["by_axis"] == {"ep": t["ep_bytes_per_step"], "dp": t["dp_bytes_per_step"]}
