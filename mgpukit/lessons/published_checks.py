"""Published runs as checks (notebook 09, tests/test_planning.py): the planner's figures beside
what papers report for named configurations — parameter counts, memory, throughput, GPU-hours.

Each row: ``name, quantity, published, planner, error (planner / published - 1), source, note``.
Parameter counts and the ZeRO memory table are exact arithmetic and must agree to a fraction of a
percent; throughput and GPU-hours depend on the time model (its matmul efficiency, overlap, what it
leaves out) and on what the papers do not publish (the layout, the cluster size), so their error is
reported, not hidden. A configuration the planner cannot express gets ``planner = None`` and the
planner's own refusal as the note.

Sources (figures checked against the papers):

- [GPT3]  Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: GPT-3 175.0B.
- [L1]    Touvron et al. 2023a, "LLaMA: Open and Efficient Foundation Language Models", Table 2
          (65.2B: 80 layers, d 8192, 64 heads, 2k context, 4M-token batch) and §2.4: "our code
          processes around 380 tokens/sec/GPU on 2048 A100 GPU with 80GB of RAM".
- [L2]    Touvron et al. 2023b, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1
          (2.0T tokens, 4M-token batch, 4k context) and Table 2: 184,320 GPU-hours (7B) and
          1,720,320 (70B) on A100-80GB; parameter counts of the released checkpoints
          (Hugging Face meta-llama/Llama-2-7b-hf: 6,738,415,616; -70b-hf: 68,976,648,192).
- [L3]    Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4 (8k-context pre-training of
          405B, 16M-token batch, TP 8, CP 1, PP 16): 8,192 H100 with DP 64, 430 TFLOP/s per GPU,
          43% BF16 MFU; 16,384 H100 with DP 128, 400 TFLOP/s per GPU, 41% BF16 MFU (the third
          row, CP 16 at 128k context, 380 TFLOP/s and 38%, is not checked here). §3.3.2
          balances the pipeline by removing one transformer layer from the first and the last
          stage: 126 layers = 7 + 14 × 8 + 7 on 16 stages; what it says about memory is read in
          :func:`llama3_memory_rows` (the layout: ``mgpukit.costmodel.validation.llama3_layout``).
- [ZeRO]  Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
          Parameter Models", Figure 1: Ψ = 7.5B, N_d = 64, K = 12 -> 120 GB (DDP), 31.4 GB
          (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p) of model states per GPU.

Megatron-LM's Table 1 runs (Narayanan et al. 2021) are kept with the planner's time model in
``mgpukit.costmodel.published`` where that module exists.
"""
from __future__ import annotations

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.layout import Layout, LayoutError
from mgpukit.costmodel.memory import model_state_bytes
from mgpukit.costmodel.planner import plan, search
from mgpukit.costmodel.shapes import ModelShape, get_shape, param_count
from mgpukit.costmodel.training_cost import time_to_train
from mgpukit.costmodel.validation import LLAMA3_STAGE_LAYERS, llama3_layout


def llama1_65b() -> ModelShape:
    """LLaMA 65B [L1, Table 2]: ``data/models/llama-65b.toml`` (80 layers, d 8192, 64 heads, SwiGLU
    d_ff 22016, vocab 32000, 2k context)."""
    return get_shape("llama-65b")


def llama3_405b_layout(dp: int, **kw) -> Layout:
    """Llama 3 405B's 8k-context layout [L3, Table 4, §3.3.2]: `validation.llama3_layout`
    (v = 8 chunks of one layer, no activation checkpointing, ZeRO-2 memory; its docstring says
    which of these the paper states and which are derived or assumed). Override with ``kw``."""
    return llama3_layout(dp, **kw)


def _row(name, quantity, published, planner, source, note="", unit=""):
    error = None if planner is None else planner / published - 1
    return {"name": name, "quantity": quantity, "published": published, "planner": planner, "error": error,
            "unit": unit, "source": source, "note": note}


def parameter_rows() -> list[dict]:
    rows = [
        _row("GPT-3 175B", "parameters", 175.0e9, param_count(get_shape("175b")), "[GPT3] Table 2.1",
             "published figure rounded to 0.1 B"),
        _row("LLaMA 65B", "parameters", 65.2e9, param_count(llama1_65b()), "[L1] Table 2",
             "published figure rounded to 0.1 B"),
        _row("Llama 2 7B", "parameters", 6_738_415_616, param_count(get_shape("7b")), "[L2] released checkpoint"),
        _row("Llama 2 70B", "parameters", 68_976_648_192, param_count(get_shape("70b")), "[L2] released checkpoint"),
    ]
    return rows


def zero_memory_rows() -> list[dict]:
    published = {0: 120e9, 1: 31.4e9, 2: 16.6e9, 3: 1.9e9}  # bytes per GPU, [ZeRO] Figure 1
    names = {0: "DDP", 1: "P_os (ZeRO-1)", 2: "P_os+g (ZeRO-2)", 3: "P_os+g+p (ZeRO-3)"}
    rows = []
    for z, want in published.items():
        got = sum(model_state_bytes(7.5e9, Layout(dp=64, zero=z)).values())
        rows.append(_row(f"7.5B, N_d = 64, {names[z]}", "model states per GPU", want, got,
                         "[ZeRO] Figure 1", "published figures rounded to 0.1 GB", unit="B"))
    return rows


def throughput_rows() -> list[dict]:
    """Tokens/s per GPU, GPU-hours and MFU of named runs beside the planner's best layout for the
    same model, GPU, cluster size and batch (the papers do not publish every layout)."""
    rows = []
    a100, h100 = load_profile("a100-nvlink"), load_profile("h100-ib")
    # LLaMA 65B on 2048 A100-80GB, 4M-token batch = 2048 sequences of 2048
    best = search(llama1_65b(), 2048, a100, global_batch=2048, top=1)[0]
    rows.append(_row("LLaMA 65B, 2048 A100-80GB", "tokens/s per GPU", 380.0,
                     best.time["tokens_per_s"] / 2048, "[L1] §2.4", f"planner's best layout: {best.layout.describe()}"))
    # Llama 2 7B / 70B: 2T tokens, 4M-token batch = 1024 sequences of 4096; cluster size not published
    for model, hours, gpus in (("7b", 184_320, 256), ("70b", 1_720_320, 1024)):
        best = search(model, gpus, a100, global_batch=1024, top=1)[0]
        rows.append(_row(f"Llama 2 {model.upper()}, 2T tokens, A100-80GB", "GPU-hours", hours,
                         time_to_train(best, 2e12)["gpu_hours"], "[L2] Table 2",
                         f"cluster size not published: planned on {gpus} GPUs, {best.layout.describe()}"))
    # Llama 3 405B, Table 4 rows 1 and 2: the published layout with the uneven stages of §3.3.2
    for gpus, dp, mfu in ((8192, 64, 0.43), (16384, 128, 0.41)):
        l3 = llama3_405b_layout(dp)
        try:
            p = plan("405b", gpus, h100, l3)
            got = p.mfu
            fit = "fits" if p.fits else "does not fit"
            note = (f"the published degrees, uneven stages; v, micro-batch, checkpointing, ZeRO assumed: "
                    f"{l3.describe()}; predicted {p.memory['total'] / 1e9:.0f} GB per GPU, {fit} in "
                    f"{p.memory_limit / 1e9:.0f} GB")
        except LayoutError as e:
            got, note = None, f"the published layout cannot be planned: {e}"
        rows.append(_row(f"Llama 3 405B, {gpus} H100, TP 8 PP 16 DP {dp}", "MFU", mfu, got, "[L3] Table 4", note))
    best = search("405b", 8192, h100, global_batch=2048, top=1)
    if best:
        rows.append(_row("Llama 3 405B, 8192 H100, planner's best layout", "MFU", 0.43, best[0].mfu,
                         "[L3] Table 4", f"planner's best layout: {best[0].layout.describe()}"))
    return rows


def llama3_memory_rows() -> list[dict]:
    """Llama 3 405B on 8,192 H100: memory of the fullest GPU as each statement of the paper about
    its memory is applied in turn [L3, §3.3.2] — the reconciliation of "trained" with "does not
    fit". Each row: ``step``, ``statement`` (quoted or derived), ``layout``, ``plan``, ``gb``
    (fullest GPU), ``usable_gb``, ``fits``, ``mfu``."""
    h100 = load_profile("h100-ib")
    steps = [
        ("previous assumptions", "v = 2 chunks, selective checkpointing, ZeRO-1 (assumed, not published)",
         llama3_layout(64, v=2, checkpointing="selective", zero=1)),
        ("one layer per chunk", "\"the first model chunk on the first stage has only the embedding\": with one "
         "layer fewer there, chunks hold one layer, so v = 8 (16 × 8 = 126 layers + the two ends)",
         llama3_layout(64, checkpointing="selective", zero=1)),
        ("no activation checkpointing", "\"we could pre-train Llama 3 on sequences of 8K tokens without activation "
         "checkpointing\" (with fused attention, selective frees only the log-sum-exp)",
         llama3_layout(64, zero=1)),
        ("FSDP shards gradients", "\"Our use of FSDP for Llama 3 shards optimizer states and gradients\": "
         "ZeRO-2's memory", llama3_layout(64)),
        ("16,384 GPUs (Table 4, row 2)", "16 sequences per DP group: at most 16 micro-batches × 8 chunks in flight",
         llama3_layout(128)),
    ]
    rows = []
    for step, statement, layout in steps:
        gpus = layout.world_size
        p = plan("405b", gpus, h100, layout, framework="fsdp")
        rows.append({"step": step, "statement": statement, "layout": layout.describe(), "plan": p, "gpus": gpus,
                     "gb": p.memory["total"] / 1e9, "activations_gb": p.memory["activations"] / 1e9,
                     "usable_gb": p.memory_limit / 1e9, "hbm_gb": h100.memory_bytes / 1e9, "fits": p.fits,
                     "mfu": p.mfu})
    return rows


def published_rows() -> list[dict]:
    """Every check: parameter counts, the ZeRO memory table, throughput and GPU-hours."""
    return parameter_rows() + zero_memory_rows() + throughput_rows()


def format_rows(rows: list[dict]) -> str:
    """A plain table: name, quantity, published, planner, error."""
    def fmt(x, unit):
        if x is None:
            return "—"
        if unit == "B":
            return f"{x / 1e9:.2f} GB"
        if x >= 1e6:
            return f"{x:.4g}"
        return f"{x:,.3g}" if x < 1 else f"{x:,.0f}"
    lines = [f"{'run':<44} {'quantity':<20} {'published':>14} {'planner':>14} {'error':>8}"]
    for r in rows:
        err = "—" if r["error"] is None else f"{r['error']:+.1%}"
        lines.append(f"{r['name']:<44} {r['quantity']:<20} {fmt(r['published'], r['unit']):>14} "
                     f"{fmt(r['planner'], r['unit']):>14} {err:>8}")
    return "\n".join(lines)
