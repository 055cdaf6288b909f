"""The GPU path, checked without a GPU (issue 18).

Method: each trap that gloo forgives but NCCL or CUDA does not is made visible on CPU workers —
a device check at every collective, a guard that turns a factory call without `device=` into a
meta tensor, a strict point-to-point mode with NCCL's rendezvous rules, a fake CUDA clock that
counts synchronisations — and each check is shown to catch a planted bug before it is trusted.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import mgpukit
from mgpukit.runtime.launcher import OversubscribedWarning, launch


def _launch(fn, n, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        return launch(fn, n, *args, echo=False, timeout_s=kw.pop("timeout_s", 120), **kw)


# ---------------------------------------------------------------- numerics: mixed precision


def test_accelerate_mixed_precision_env_does_not_change_an_fp32_ddp_run(monkeypatch):
    """`accelerate launch --mixed_precision bf16` exports this; an fp32 run must stay fp32."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    rec = mgpukit.run("ddp", workers=2, steps=3, mode="cpu")
    assert rec["parity"]["ok"], rec["parity"]
    assert rec["extra"]["0"]["mixed_precision"] == "no"
