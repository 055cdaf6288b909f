"""Context parallelism: each sequence split over the ranks of a "cp" group, attention as a ring.

- `ring.py`   ring attention as an autograd function: K/V around the ring (forward), K/V with
              their dK/dV (backward), partial results merged by the log-sum-exp rule; the
              causal mask load-balanced (rank i holds chunks i and 2·cp − 1 − i)
- `apply.py`  `apply_cp`: the unmodified GPT on this rank's tokens, its attention cores ringed
- theory      `mgpukit.costmodel.cp_ep`: ring bytes and messages per step

Strategy: `cp` (`mgpukit run cp --workers 2`; with data parallelism `--dp 2 --cp 2`). The cp
ranks are cut inside the dp axis (`runtime.dims`): they read the same sequences and their
gradients are averaged with the data-parallel replicas' in the one dp sync.
"""
from mgpukit.config import DENSE_GPT_MODELS
from mgpukit.costmodel.cp_ep import cp_bytes, cp_messages
from mgpukit.costmodel.layout import Layout
from mgpukit.strategies.context_parallel.apply import apply_cp, check_cp
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.strategies.registry import register


def cp_theory(cfg, dims) -> dict:
    """Ring bytes and messages per rank per step (`costmodel.cp_ep`), and the dp all-reduce
    over every data rank (cp included)."""
    mcfg, layout = cfg.model_config(), cfg.layout
    kw = dict(n_layer=mcfg.n_layer, cp=layout.cp, micro_batches=layout.num_micro_batches)
    ring = cp_bytes(rows=layout.micro_batch, seq_len=mcfg.seq_len, d_model=mcfg.d_model, **kw)
    dp = dp_theory(cfg, dims)
    return {"cp_bytes_per_step": ring["total"], "cp_bytes_fwd_bwd": ring,
            "cp_messages_per_step": cp_messages(**kw), "dp_bytes_per_step": dp["comm_bytes"],
            "comm_bytes": ring["total"] + dp["comm_bytes"], "params": dp["params"]}


def _validate(cfg, dims) -> None:
    check_cp(cfg.model_config(), dims.cp)


register("cp", family="context-parallel",
         description="context parallelism: each sequence split over cp ranks, ring attention (K/V passed by p2p)",
         layout=lambda n: Layout(cp=n, dtype="fp32"), split=apply_cp, models=DENSE_GPT_MODELS,
         theory=cp_theory, validate=_validate, min_workers=2, composes=("dp",))
