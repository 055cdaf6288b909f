"""Shape mode: the real strategy code under fake tensors on the virtual clock.

Method: small runs (gpt-tiny, 2 ranks, 1 step) checked against what must hold without data —
the collective bytes a data-parallel step moves (the gradient's size × the ring's bus factor),
timelines that repeat exactly, a memory meter that reads the fake tensors' sizes, and no real
memory for a model whose weights alone would be gigabytes.
"""
from __future__ import annotations

import pytest
import torch

from mgpukit.cli import main
from mgpukit.experiment import prepare, run
from mgpukit.measure.memory import ActivationMeter, tensor_bytes
from mgpukit.measure.shape import fake_mode, is_fake, value_or_none
from mgpukit.models import GPT, gpt2_1_3b, gpt_tiny
from mgpukit.models.gpt import lm_loss

EMU = dict(mode="emulated", profile="h100-nvlink")


def test_shape_mode_needs_the_virtual_clock(capsys):
    with pytest.raises(ValueError, match="--emulate"):
        prepare("ddp", workers=2, mode="cpu", shape=True)
    assert main(["run", "ddp", "--workers", "2", "--shape", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mgpukit: error:") and "--emulate" in err[0]


def test_real_scale_models_only_in_shape_mode():
    with pytest.raises(ValueError, match="shape mode only"):
        prepare("ddp", workers=2, **EMU, model="gpt2-350m")
    p = prepare("tp", workers=8, **EMU, shape=True, model="llama-7b")  # tp=8 divides its sizes
    assert p.shape and p.dims.tp == 8


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_big_model_allocates_nothing_and_the_meter_reads_its_sizes():
    """gpt2-1.3b's sizes (one of its 24 layers, its 50304-word embedding and head: 1.1 GB of
    fp32 weights) built, run forward and backward under fake mode: the meter reads every byte,
    the process holds almost none of them."""
    before = _rss_bytes()
    with fake_mode():
        model = GPT(gpt2_1_3b(n_layer=1))  # 1 of its 24 layers: the same sizes, a faster test
        params = list(model.parameters())
        meter = ActivationMeter(params)
        x = torch.zeros(1, 1024, dtype=torch.long)
        with meter.track():
            loss = lm_loss(model(x), x)
        loss.backward()
        assert is_fake(loss) and value_or_none(loss) is None
        weights = tensor_bytes(params)
        grads = tensor_bytes(p.grad for p in params)
    n = sum(p.numel() for p in params)
    assert weights == grads == 4 * n > 1e9
    assert meter.peak > 100e6  # the logits alone are 1024 × 50304 fp32
    assert _rss_bytes() - before < 200e6  # far below the 2.2 GB of weights + gradients


def test_a_data_parallel_step_in_shape_mode_moves_the_gradient_and_repeats():
    """dp-naive on 2 ranks: the all-reduced bytes are the gradient's (bus factor 2(n-1)/n = 1),
    losses are null, parity n/a — and a second run gives the same timeline to the bit."""
    kw = dict(workers=2, **EMU, shape=True, steps=1, model="gpt-tiny")
    first, second = run("dp-naive", **kw), run("dp-naive", **kw)
    grad_bytes = 4 * sum(p.numel() for p in GPT(gpt_tiny()).parameters())
    comm = first["comm"]["0"]
    assert comm["payload_bytes"] == grad_bytes and comm["bytes_sent"] == grad_bytes
    assert first["losses"] == [None] and first["parity"] == "n/a (shape mode)" and first["shape"]
    mem = first["memory"]["0"]
    assert mem["params"] == mem["grads"] == grad_bytes and mem["activations"] > 0
    assert first["timeline"] == second["timeline"] and first["step_time_s"] == second["step_time_s"]
    assert first["step_time_s"][0] > 0


@pytest.mark.parametrize("name", ["dp-fp16", "dp-int8", "dp-topk", "dp-powersgd"])
def test_compression_in_shape_mode_sends_the_bytes_of_the_real_run(name):
    """Each compressor's exchange is sized by shapes alone (top-k's k, int8's chunks, PowerSGD's
    P and Q): in shape mode every rank hands the recorder exactly the bytes the real run does,
    step by step — PowerSGD's dense warm-up step first, then its low-rank ones."""
    kw = dict(workers=2, steps=3, model="gpt-tiny", parity=False, options={"start_iter": 2} if name == "dp-powersgd" else {})
    fake = run(name, **EMU, shape=True, **kw)
    real = run(name, mode="cpu", **kw)
    assert fake["shape"] and fake["losses"] == [None] * 3
    assert fake["comm"]["0"]["bytes_sent"] == real["comm"]["0"]["bytes_sent"] > 0
    assert fake["comm"]["0"]["collectives"] == real["comm"]["0"]["collectives"]
