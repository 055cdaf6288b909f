"""Tensor parallelism: every layer split over the ranks of the mesh's "tp" axis.

- `comm.py`    the operators f, g (and the sequence-parallel pair) as autograd functions
- `layers.py`  column- and row-parallel linears, the vocabulary-parallel embedding
- `loss.py`    cross-entropy over a split vocabulary (no rank holds the full logits)
- `apply.py`   `apply_tp`: Megatron-style TP (+ sequence parallelism) on the unmodified GPT
- `native.py`  `apply_tp_native`: the same plan with PyTorch's DTensor `parallelize_module`
- `theory.py`  predicted bytes per step and activation memory

Strategies: `tp`, `tp-sp`, `tp-native` (`--sp` for DTensor's SequenceParallel); each composes
with data parallelism (`mgpukit run tp --tp 2 --dp 2`), and `dp-naive` / `dp-bucketed` take
`--tp` (Megatron-style layers under their gradient sync).
"""
from mgpukit.config import DENSE_GPT_MODELS
from mgpukit.costmodel.layout import Layout
from mgpukit.strategies.knobs import Knob
from mgpukit.strategies.registry import register
from mgpukit.strategies.tensor_parallel.theory import tp_theory

GPT_ONLY = DENSE_GPT_MODELS  # heads and MLP columns to split: the dense GPTs only


def _tp(sp: bool):
    return lambda n: Layout(tp=n, sp=sp, dtype="fp32")


register("tp", family="tensor-parallel",
         description="Megatron-style tensor parallelism: heads and MLP columns split, 2 all-reduces per block per pass",
         layout=_tp(False), models=GPT_ONLY, theory=tp_theory, min_workers=2)
register("tp-sp", family="tensor-parallel",
         description="tensor + sequence parallelism: all-reduces become reduce-scatter / all-gather pairs",
         layout=_tp(True), models=GPT_ONLY, theory=tp_theory, min_workers=2)
register("tp-native", family="tensor-parallel", tensor="native", emulation=False,
         knobs=(Knob("count_comm", bool, True, "count and time DTensor's collectives (CommObserver, "
                     "a dispatch mode that slows every op; the benchmark turns it off)"),),
         description="PyTorch's DTensor parallelize_module (Colwise/Rowwise, --sp: SequenceParallel)",
         layout=_tp(False), models=GPT_ONLY, theory=tp_theory, min_workers=2)
