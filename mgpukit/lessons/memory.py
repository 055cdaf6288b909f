"""Notebook 07's studies: where activation memory goes, what checkpointing and precision cost.

Each function runs the kit (`mgpukit.run`) and returns rows of figures — measured by the run
(activation peak from `ActivationMeter`, step times from the wall clock) next to the cost
model's prediction for the same layout (`mgpukit.costmodel.memory`). Plots and prose live in
the notebook; nothing here prints.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from mgpukit import experiment
from mgpukit.config import RunConfig
from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout, LayoutError, check_layout
from mgpukit.costmodel.memory import activation_bytes_per_layer, memory_per_rank, model_state_bytes
from mgpukit.costmodel.shapes import ModelShape, get_shape, param_count
from mgpukit.experiment import run
from mgpukit.measure.memory import ActivationMeter
from mgpukit.models import GPT
from mgpukit.models.gpt import lm_loss
from mgpukit.strategies.policies.checkpointing import apply_checkpointing
from mgpukit.studies.checkpointing import measure_checkpointing  # noqa: F401  (notebook 07: `lab.…`)


def gpt_shape(cfg) -> ModelShape:
    """The cost model's description of a `GPTConfig` (GPT-2 style: LayerNorm, GELU, learned
    positions, untied head)."""
    return ModelShape(n_layer=cfg.n_layer, d_model=cfg.d_model, n_head=cfg.n_head, d_ff=cfg.d_ff,
                      vocab=cfg.vocab_size, seq_len=cfg.seq_len, dropout=cfg.dropout > 0)


def measure_activations(*, seq_len: int, batch: int, checkpointing: str = "none", dtype: str = "fp32",
                        model: str = "gpt-tiny") -> int:
    """Peak activation bytes of one forward + backward of the GPT at (`seq_len`, `batch`),
    measured in this process by the same meter the runs use (forward and recomputation)."""
    cfg = RunConfig(model=model).model_config()
    cfg = type(cfg)(**{**cfg.__dict__, "seq_len": seq_len})
    net = apply_checkpointing(GPT(cfg), checkpointing)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(cfg.vocab_size, (batch, seq_len + 1), generator=g)
    meter = ActivationMeter(net.parameters())
    with meter.track(), _autocast(dtype):
        logits = net(idx[:, :-1]).float()
    with meter.track():
        loss = lm_loss(logits, idx[:, 1:])
    loss.backward()
    return meter.peak


def _autocast(dtype: str):
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])


def predict_activations(*, seq_len: int, batch: int, checkpointing: str = "none", dtype: str = "fp32",
                        model: str = "gpt-tiny", flash_attention: bool = True) -> float:
    """The cost model's activation bytes for the same GPT and layout (one rank, no pipeline).
    ``flash_attention``: the GPT's SDPA is fused (True); False charges the ``s×s`` matrices."""
    cfg = RunConfig(model=model).model_config()
    shape = gpt_shape(type(cfg)(**{**cfg.__dict__, "seq_len": seq_len}))
    layout = Layout(micro_batch=batch, checkpointing=checkpointing, dtype=dtype, flash_attention=flash_attention)
    return memory_per_rank(shape, layout)["activations"]


def activation_sweep(*, seq_lens=(32, 64, 128), batches=(4, 8, 16), checkpointing: str = "none",
                     model: str = "gpt-tiny") -> list[dict]:
    """Measured vs predicted activation bytes over sequence lengths (batch 8) and batches
    (the model's sequence length): rows with `seq_len, batch, measured, predicted, ratio` —
    `predicted` for the fused attention the GPT runs (SDPA), `predicted_materialized` for an
    attention that stores its s×s matrices (Korthikanti et al. 2022's term)."""
    base_s = RunConfig(model=model).model_config().seq_len
    points = [(s, 8) for s in seq_lens] + [(base_s, b) for b in batches if (base_s, b) not in
                                           [(s, 8) for s in seq_lens]]
    rows = []
    for s, b in points:
        kw = dict(seq_len=s, batch=b, checkpointing=checkpointing, model=model)
        measured, predicted = measure_activations(**kw), predict_activations(**kw)
        rows.append({"seq_len": s, "batch": b, "checkpointing": checkpointing, "measured": measured,
                     "predicted": predicted, "ratio": measured / predicted,
                     "predicted_materialized": predict_activations(**kw, flash_attention=False)})
    return rows


def memory_candidates(gpus: int, *, checkpointing: str = "selective", dtype: str = "bf16",
                      micro_batch: int = 1) -> dict[str, Layout]:
    """A handful of layouts of `gpus` GPUs to compare (name -> Layout): plain DP, the ZeRO
    stages, tensor parallelism inside an 8-GPU node, and tp × pp."""
    tp = min(8, gpus)
    kw = dict(checkpointing=checkpointing, dtype=dtype, micro_batch=micro_batch)
    out = {"DDP": Layout(dp=gpus, **kw)}
    for z in (1, 2, 3):
        out[f"ZeRO-{z}"] = Layout(dp=gpus, zero=z, **kw)
    if gpus % tp == 0 and tp > 1:
        out[f"tp {tp} + SP + ZeRO-1"] = Layout(dp=gpus // tp, tp=tp, zero=1, sp=True, **kw)
        if gpus // tp >= 2:
            pp = gpus // tp
            out[f"tp {tp} + SP × pp {pp}"] = Layout(tp=tp, pp=pp, sp=True, num_micro_batches=2 * pp, **kw)
    return out


def memory_table(model: str | ModelShape, gpus: int, *, profile: str = "h100-nvlink", seq_len: int | None = None,
                 **layout_kw) -> list[dict]:
    """Predicted bytes per GPU by category for each candidate layout, and whether it fits in the
    profile's usable memory (`HardwareProfile.usable_memory_bytes`: 90 % of an H100's 85.5 GB,
    77.0 GB — the line the planner of notebook 09 and the stages of notebook 06 draw too)."""
    shape = get_shape(model) if isinstance(model, str) else model
    if seq_len:
        shape = dataclasses.replace(shape, seq_len=seq_len)
    usable = load_profile(profile).usable_memory_bytes
    rows = []
    for name, layout in memory_candidates(gpus, **layout_kw).items():
        try:
            check_layout(shape, layout, gpus=gpus)
        except LayoutError as e:
            rows.append({"layout": name, "describe": layout.describe(), "error": str(e), "fits": False})
            continue
        mem = memory_per_rank(shape, layout)
        rows.append({"layout": name, "describe": layout.describe(), **mem, "usable": usable,
                     "fits": mem["total"] <= usable})
    return rows


def smallest_zero_stage_that_fits(model: str, gpus: int, *, profile: str = "h100-nvlink", **layout_kw) -> int | None:
    """Exercise answer: the lowest ZeRO stage (0 = plain DDP) whose predicted memory fits."""
    names = {"DDP": 0, "ZeRO-1": 1, "ZeRO-2": 2, "ZeRO-3": 3}
    for row in memory_table(model, gpus, profile=profile, **layout_kw):
        if row["layout"] in names and row["fits"]:
            return names[row["layout"]]
    return None


def model_state_gb(model: str, *, dtype: str = "bf16", optimizer_states: int = 2) -> float:
    """Exercise answer: GB of params + grads + optimizer state of `model` on one GPU, no sharding
    (`optimizer_states` fp32 tensors per parameter: 2 for Adam, 1 for SGD with momentum)."""
    return sum(model_state_bytes(param_count(get_shape(model)), Layout(dtype=dtype),
                                 optimizer_states=optimizer_states).values()) / 1e9


def activations_per_layer_gb(model: str, *, checkpointing: str, micro_batch: int = 1) -> float:
    """Exercise answer: GB one layer keeps for backward (16-bit, no tp) at the model's sequence length."""
    return activation_bytes_per_layer(get_shape(model), micro_batch=micro_batch, checkpointing=checkpointing) / 1e9


def precision_curves(*, steps: int = 40, workers: int = 2, dtypes=("bf16",)) -> dict[str, dict]:
    """dtype -> record: `dp-naive` in each reduced precision (its parity: the loss curve against
    the fp32 reference) and "fp32": the reference itself (the `single` run, relabelled)."""
    out = {}
    for dtype in dtypes:
        rec = run("dp-naive", workers=workers, steps=steps, layout={"dtype": dtype})
        out[dtype] = {**rec, "strategy": f"dp-naive ({dtype})"}
    p = experiment.prepare("dp-naive", workers=workers, steps=steps)
    ref = experiment.reference("single", p.cfg)["record"]
    return {"fp32": {**ref, "strategy": "single (fp32 reference)"}, **out}
