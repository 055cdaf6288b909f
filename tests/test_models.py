"""The workloads: deterministic init, shapes, a sane starting loss, learning, and attention
that still runs (and still adds up) when its heads are split as tensor parallelism splits them."""

import math

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

from mgpukit.data import VOCAB_SIZE, get_batch, load_tokens, mlp_batch
from mgpukit.models import GPT, MLP, Block, GPTConfig, gpt_small, gpt_tiny, lm_loss, mlp_tiny


def _state_equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_seed_same_weights_and_caller_rng_untouched():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a, b = GPT(gpt_tiny(), seed=7), GPT(gpt_tiny(), seed=7)
    assert _state_equal(a, b)
    assert not _state_equal(a, GPT(gpt_tiny(), seed=8))
    assert torch.equal(torch.rand(3), expected_next)  # building did not consume the caller's RNG
    assert _state_equal(MLP(mlp_tiny(), seed=3), MLP(mlp_tiny(), seed=3))
    assert not _state_equal(MLP(mlp_tiny(), seed=3), MLP(mlp_tiny(), seed=4))


def test_named_pieces_for_sharding():
    cfg = gpt_tiny()
    model = GPT(cfg)
    names = {n for n, _ in model.named_parameters()}
    for expected in ["embed.tok.weight", "embed.pos.weight", "head.ln_f.weight", "head.lm_head.weight",
                     "blocks.0.attn.q_proj.weight", "blocks.0.attn.k_proj.weight",
                     "blocks.0.attn.v_proj.weight", "blocks.0.attn.o_proj.weight",
                     "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc2.weight", "blocks.0.ln_1.weight"]:
        assert expected in names
    assert len(model.blocks) == cfg.n_layer
    assert model.head.lm_head.weight.data_ptr() != model.embed.tok.weight.data_ptr()  # untied
    assert model.num_params() == sum(p.numel() for p in model.parameters())
    # GPT-2 init: residual projections are scaled down by 1/sqrt(2 * n_layer)
    std_o = model.blocks[0].attn.o_proj.weight.std().item()
    assert std_o == pytest.approx(0.02 / math.sqrt(2 * cfg.n_layer), rel=0.1)


def test_logits_shape_and_initial_loss_near_uniform():
    cfg = gpt_tiny()
    model = GPT(cfg)
    x, y = get_batch(load_tokens(), step=0, global_batch=8, seq_len=cfg.seq_len)
    logits = model(x)
    assert logits.shape == (8, cfg.seq_len, cfg.vocab_size)
    assert lm_loss(logits, y).item() == pytest.approx(math.log(VOCAB_SIZE), abs=0.1)
    assert torch.equal(GPT.loss(logits, y), lm_loss(logits, y))
    assert model(x[:, :10]).shape == (8, 10, cfg.vocab_size)  # shorter sequences are fine
    with pytest.raises(ValueError, match="longer than seq_len"):
        model(torch.zeros(1, cfg.seq_len + 1, dtype=torch.long))


def test_a_few_adam_steps_reduce_the_loss():
    cfg = gpt_tiny()
    model, tokens = GPT(cfg), load_tokens()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(20):
        x, y = get_batch(tokens, step=step, global_batch=8, seq_len=cfg.seq_len)
        loss = lm_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.8, losses


def test_mlp_shapes_and_learning():
    cfg = mlp_tiny()
    model = MLP(cfg)
    assert len(model.layers) == cfg.n_layers and isinstance(model.layers[-1], nn.Linear)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(30):
        x, y = mlp_batch(step=step, global_batch=64, d_in=cfg.d_in, d_out=cfg.d_out)
        out = model(x)
        assert out.shape == (64, cfg.d_out)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])


def test_config_refuses_bad_sizes_with_a_hint():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(vocab_size=64, seq_len=8, n_layer=1, n_head=3, d_model=64, d_ff=256)
    with pytest.raises(TypeError):  # keyword-only
        GPTConfig(64, 8, 1, 4, 64, 256)
    with pytest.raises(ValueError, match="n_layer"):
        gpt_tiny(n_layer=0)
    assert gpt_small().d_ff == 4 * gpt_small().d_model
    assert gpt_tiny(d_ff=100).d_ff == 100


def test_attention_runs_on_half_the_heads_and_shards_sum_to_the_whole():
    """Simulate a 2-way tensor-parallel shard: rank r keeps rows of q/k/v for heads
    [r*nh/2, (r+1)*nh/2) and the matching columns of o_proj. Each shard must run unchanged,
    and the two partial outputs (without o_proj's bias, added once) sum to the full output —
    the all-reduce of Megatron-LM's row-parallel layer."""
    cfg = gpt_tiny()
    block = Block(cfg)
    attn = block.attn
    x = torch.randn(2, 16, cfg.d_model)
    full = attn(x)
    half = cfg.d_model // 2
    partial_sum = torch.zeros_like(full)
    for rank in range(2):
        rows = slice(rank * half, (rank + 1) * half)
        shard = Block(cfg).attn
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj"):
                src = getattr(attn, name)
                lin = nn.Linear(cfg.d_model, half)
                lin.weight.copy_(src.weight[rows])
                lin.bias.copy_(src.bias[rows])
                setattr(shard, name, lin)
            o = nn.Linear(half, cfg.d_model, bias=False)
            o.weight.copy_(attn.o_proj.weight[:, rows])
            shard.o_proj = o
        out = shard(x)
        assert out.shape == full.shape
        assert shard.q_proj.out_features // shard.head_dim == cfg.n_head // 2
        partial_sum += out
    assert_close(partial_sum + attn.o_proj.bias, full)
