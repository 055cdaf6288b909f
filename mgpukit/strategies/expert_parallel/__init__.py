"""Expert parallelism: the experts of every MoE layer split over the ranks of an "ep" group.

- `comm.py`   the all-to-all as an autograd function (its backward is the reverse all-to-all)
- `apply.py`  `apply_ep`: the MoE GPT's experts sliced per rank behind dispatch/combine
              all-to-alls; the gradient sync (dense over dp, experts over their copies)
- the model   `mgpukit.models.moe` (router, capacity, dropped tokens, auxiliary loss)
- theory      `mgpukit.costmodel.cp_ep`: all-to-all bytes per step

Strategy: `ep` (`mgpukit run ep --workers 2`; with data parallelism `--dp 2 --ep 2`, the ep
group inside dp as DeepSpeed-MoE and torchtitan place it). Model: `gpt-moe`.
"""
from mgpukit.config import MOE_MODELS
from mgpukit.costmodel.comm import bus_factor
from mgpukit.costmodel.cp_ep import ep_all_to_alls, ep_bytes
from mgpukit.costmodel.layout import Layout
from mgpukit.strategies.expert_parallel.apply import apply_ep, apply_ep_grad_sync, check_ep
from mgpukit.strategies.registry import register
from mgpukit.training.building import build_model_shapes


def ep_theory(cfg, dims) -> dict:
    """All-to-all bytes and counts per rank per step (`costmodel.cp_ep`), and the gradient
    all-reduces: dense weights over every data rank, a rank's experts over their copies."""
    mcfg, layout = cfg.model_config(), cfg.layout
    a2a = ep_bytes(rows=layout.micro_batch, seq_len=mcfg.seq_len, d_model=mcfg.d_model, n_expert=mcfg.n_expert,
                   top_k=mcfg.top_k, capacity_factor=mcfg.capacity_factor, n_moe_layers=mcfg.n_layer,
                   ep=dims.ep, micro_batches=layout.num_micro_batches)
    named = list(build_model_shapes(cfg).named_parameters())
    expert = sum(p.numel() for n, p in named if ".experts." in n)
    dense = sum(p.numel() for _, p in named) - expert
    dense_bytes = bus_factor("all_reduce", dims.dp) * 4 * dense
    copies = dims.size("dp_outer")
    expert_bytes = bus_factor("all_reduce", copies) * 4 * expert / dims.ep
    return {"ep_bytes_per_step": a2a["total"], "ep_bytes_fwd_bwd": a2a,
            "ep_all_to_alls_per_step": ep_all_to_alls(n_moe_layers=mcfg.n_layer,
                                                      micro_batches=layout.num_micro_batches),
            "dp_bytes_per_step": dense_bytes, "expert_dp_bytes_per_step": expert_bytes,
            "comm_bytes": a2a["total"] + dense_bytes + expert_bytes,
            "params": {"dense": dense, "experts": expert, "experts_per_rank": expert // dims.ep}}


def _validate(cfg, dims) -> None:
    check_ep(cfg.model_config(), dims.ep)
    if cfg.layout.num_micro_batches > 1:
        raise ValueError("ep runs one micro-batch per step: the MoE auxiliary loss's gradient is not "
                         "divided over micro-batches (models/moe.py); drop --micro-batches.")


register("ep", family="expert-parallel",
         description="expert parallelism: MoE experts split over ep ranks, all-to-all dispatch and combine",
         layout=lambda n: Layout(ep=n, dtype="fp32"), split=apply_ep, grad_sync=apply_ep_grad_sync,
         models=MOE_MODELS, theory=ep_theory, validate=_validate, min_workers=2, composes=("dp",))
