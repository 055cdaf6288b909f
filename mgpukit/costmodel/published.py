"""Published training runs beside the planner's prediction for them.

**Megatron-LM, Table 1** of Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM" (SC'21, arXiv:2104.04473): ten GPT models from
1.7 B to 1 T parameters trained on Selene — DGX A100 nodes, 8× A100-SXM4-80GB on NVLink 3 /
NVSwitch, 8× 200 Gb/s HDR InfiniBand per node (the ``a100-nvlink`` profile) — with mixed
precision, the interleaved 1F1B schedule and full activation recomputation; vocabulary
51,200, sequence length 2,048 (§5.1). Columns transcribed from the paper's Table 1: heads,
hidden size, layers, tp, pp, GPUs, global batch, achieved teraFLOP/s per GPU, % of the
312 TFLOP/s peak. The aggregate petaFLOP/s column cross-checks every row (per-GPU × GPUs
agrees within 0.5%: :data:`AGGREGATE_PFLOPS`). The library's search corpus confirmed the
setting (vocab 51,200 and sequence 2,048: the Megatron-LM README; 502 petaFLOP/s on 3,072
GPUs for 1 T: the paper's abstract) but holds no text copy of the table itself.

The paper counts FLOPs with its closed form ``96·B·s·l·h²·(1 + s/6h + V/16lh)`` (full
recomputation included: the figure is hardware FLOPs, not MFU), so the prediction converts
its step time with the same formula (:func:`mgpukit.costmodel.flops.megatron_flops`).

Not in Table 1, so assumed the same for every row (stated, not fitted per row): micro-batch 1;
the interleaved schedule with the fewest chunks per stage (> 1) that divide the stage's
layers (2; 3 for 76 B and 530 B, whose stages hold 15 and 3 layers); tensor parallelism without
sequence parallelism (published a year later) and without comm/compute overlap; Megatron's
fused softmax, not flash attention (also later), with attention and hidden dropout 0.1; data-
parallel gradients all-reduced after the pipeline flush, not overlapped (Megatron-LM's
``LocalDDP`` of 2021); no ZeRO.
"""

from __future__ import annotations

from dataclasses import dataclass

from mgpukit.costmodel.flops import megatron_flops
from mgpukit.costmodel.hardware import HardwareProfile, load_profile
from mgpukit.costmodel.layout import Layout
from mgpukit.costmodel.shapes import ModelShape
from mgpukit.costmodel.steptime import step_time

SOURCE = ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters "
          "Using Megatron-LM', arXiv:2104.04473, Table 1")
VOCAB, SEQ_LEN = 51200, 2048  # §5.1: "All models use a vocabulary size of 51,200 and a sequence length of 2048"


@dataclass(frozen=True)
class PublishedRun:
    """One row of Megatron-LM's Table 1."""

    params_b: float  # billions, as published
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int  # global batch, sequences
    tflops_per_gpu: float  # achieved, Megatron's FLOP formula
    percent_peak: float


MEGATRON_TABLE_1 = (
    PublishedRun(1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44),
    PublishedRun(3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44),
    PublishedRun(7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46),
    PublishedRun(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43),
    PublishedRun(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44),
    PublishedRun(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45),
    PublishedRun(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47),
    PublishedRun(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50),
    PublishedRun(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52),
    PublishedRun(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52),
)
# Table 1's last column, petaFLOP/s over all GPUs: a check on the transcription.
AGGREGATE_PFLOPS = (4.4, 8.8, 18.2, 34.6, 70.8, 143.8, 227.1, 297.4, 410.2, 502.0)


def megatron_shape(run: PublishedRun) -> ModelShape:
    """The GPT of one row: 4h MLP, learned positions, tied embeddings, dropout 0.1."""
    return ModelShape(name=f"megatron-{run.params_b:g}b", n_layer=run.layers, d_model=run.hidden,
                      n_head=run.heads, d_ff=4 * run.hidden, vocab=VOCAB, seq_len=SEQ_LEN,
                      tied_embeddings=True, dropout=True)


def megatron_layout(run: PublishedRun) -> Layout:
    """The layout of one row (module docstring: micro-batch 1, interleaved, full recompute)."""
    dp = run.gpus // (run.tp * run.pp)
    per_stage = run.layers // run.pp
    kw = {}
    if run.pp > 1:
        v = min(c for c in range(2, per_stage + 1) if per_stage % c == 0)  # fewest chunks > 1
        kw = dict(schedule="interleaved", v=v)
    return Layout.from_global_batch(global_batch=run.batch, dp=dp, tp=run.tp, pp=run.pp, micro_batch=1,
                                    checkpointing="full", dtype="fp16", flash_attention=False, **kw)


def megatron_prediction(run: PublishedRun, profile: "str | HardwareProfile" = "a100-nvlink") -> dict:
    """The planner's step time for ``run`` and its achieved TFLOP/s per GPU (Megatron's count)."""
    hw = load_profile(profile) if isinstance(profile, str) else profile
    shape, layout = megatron_shape(run), megatron_layout(run)
    t = step_time(shape, layout, hw, overlap_dp=False)
    tflops = megatron_flops(shape, run.batch, full_recompute=True) / t["total_s"] / run.gpus / 1e12
    return {"run": run, "layout": layout, "time": t, "predicted_tflops": tflops,
            "published_tflops": run.tflops_per_gpu, "error": tflops / run.tflops_per_gpu - 1}


def published_table(profile: "str | HardwareProfile" = "a100-nvlink") -> list[dict]:
    """:func:`megatron_prediction` for every row of Megatron-LM's Table 1."""
    return [megatron_prediction(run, profile) for run in MEGATRON_TABLE_1]


def format_table(rows: list[dict]) -> str:
    """Published vs predicted TFLOP/s per GPU, one line per row."""
    lines = [f"{'model':>8} {'tp':>3} {'pp':>3} {'GPUs':>5} {'published':>9} {'predicted':>9} {'error':>7}"]
    for r in rows:
        run = r["run"]
        lines.append(f"{run.params_b:>7g}B {run.tp:>3} {run.pp:>3} {run.gpus:>5} {run.tflops_per_gpu:>9.0f} "
                     f"{r['predicted_tflops']:>9.1f} {r['error']:>+7.1%}")
    return "\n".join(lines)
