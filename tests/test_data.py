"""The data rules strategies rely on: a fixed alphabet, a reproducible shipped corpus, and
per-rank slices that concatenate to exactly the single-process batch."""

import importlib.util
from pathlib import Path

import pytest
import torch

from mgpukit.data import (
    VOCAB,
    VOCAB_SIZE,
    decode,
    encode,
    get_batch,
    iter_batches,
    load_tokens,
    mlp_batch,
    split_microbatches,
    tinytext_path,
)

REPO = Path(__file__).resolve().parents[1]


def test_vocab_is_fixed_and_round_trips():
    assert len(set(VOCAB)) == len(VOCAB) <= VOCAB_SIZE
    text = 'chapter 3\n"where is the cat?" asked tom; 2 plus 2 is 4!'
    ids = encode(text)
    assert ids.dtype == torch.long and decode(ids) == text
    with pytest.raises(ValueError, match="not in mgpukit.data.VOCAB"):
        encode("Capital letters are not in the alphabet")


def test_shipped_corpus_loads_and_is_small():
    assert tinytext_path() == REPO / "data" / "tinytext.txt"
    assert 150_000 <= tinytext_path().stat().st_size <= 300_000
    tokens = load_tokens()
    assert tokens.dim() == 1 and tokens.numel() == tinytext_path().stat().st_size
    assert 0 <= tokens.min() and tokens.max() < len(VOCAB)


def test_missing_file_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="make_tinytext.py"):
        load_tokens(tmp_path / "nope.txt")


def test_regeneration_is_byte_identical(tmp_path):
    spec = importlib.util.spec_from_file_location("make_tinytext", REPO / "data" / "make_tinytext.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = script.main(tmp_path / "tinytext.txt")
    assert out.read_bytes() == tinytext_path().read_bytes()


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_rank_slices_concatenate_to_the_single_process_batch(world_size):
    tokens = load_tokens()
    kw = dict(step=5, global_batch=8, seq_len=32, seed=3)
    x_ref, y_ref = get_batch(tokens, **kw)
    assert x_ref.shape == (8, 32) and torch.equal(x_ref[:, 1:], y_ref[:, :-1])
    parts = [get_batch(tokens, rank=r, world_size=world_size, **kw) for r in range(world_size)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x_ref)
    assert torch.equal(torch.cat([p[1] for p in parts]), y_ref)
    mlp_ref = mlp_batch(step=5, global_batch=8, d_in=6, d_out=2, seed=3)
    mlp_parts = [mlp_batch(step=5, global_batch=8, d_in=6, d_out=2, seed=3, rank=r, world_size=world_size)
                 for r in range(world_size)]
    assert torch.equal(torch.cat([p[0] for p in mlp_parts]), mlp_ref[0])
    assert torch.equal(torch.cat([p[1] for p in mlp_parts]), mlp_ref[1])


def test_batches_depend_on_seed_and_step_only():
    tokens = load_tokens()
    kw = dict(global_batch=4, seq_len=16)
    assert torch.equal(get_batch(tokens, step=1, **kw)[0], get_batch(tokens, step=1, **kw)[0])
    assert not torch.equal(get_batch(tokens, step=1, **kw)[0], get_batch(tokens, step=2, **kw)[0])
    assert not torch.equal(get_batch(tokens, step=1, **kw)[0], get_batch(tokens, step=1, seed=1, **kw)[0])
    batches = list(iter_batches(tokens, num_steps=3, start_step=4, **kw))
    assert all(torch.equal(b[0], get_batch(tokens, step=4 + i, **kw)[0]) for i, b in enumerate(batches))


def test_uneven_splits_are_refused():
    tokens = load_tokens()
    with pytest.raises(ValueError, match="not divisible by world_size=3"):
        get_batch(tokens, step=0, global_batch=8, seq_len=16, world_size=3)
    with pytest.raises(ValueError, match="rank"):
        get_batch(tokens, step=0, global_batch=8, seq_len=16, rank=2, world_size=2)
    with pytest.raises(ValueError, match="not divisible"):
        mlp_batch(step=0, global_batch=6, d_in=4, d_out=2, world_size=4)
    x, y = get_batch(tokens, step=0, global_batch=8, seq_len=16)
    micro = split_microbatches(x, y, 4)
    assert len(micro) == 4 and torch.equal(torch.cat([m[0] for m in micro]), x)
    with pytest.raises(ValueError, match="micro-batches"):
        split_microbatches(x, y, 3)
