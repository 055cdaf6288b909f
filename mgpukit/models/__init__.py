"""The workloads: a tiny GPT and an MLP. Plain modules; no parallelism inside.

`weights` holds what every applier does to a model from outside the same way: `to_device`
(fake tensors too) and `full_state_dict` (CPU copies, unwrapped names)."""

from mgpukit.models.gpt import (
    GPT,
    Block,
    CausalSelfAttention,
    FeedForward,
    GPTConfig,
    GPTEmbedding,
    GPTHead,
    gpt2_1_3b,
    gpt2_124m,
    gpt2_350m,
    gpt_small,
    gpt_tiny,
    llama_7b,
    lm_loss,
)
from mgpukit.models.mlp import MLP, MLPConfig, mlp_tiny, mlp_wide
from mgpukit.models.moe import MoEConfig, MoEGPT, gpt_moe, mixtral_8x7b

__all__ = [
    "GPT", "Block", "CausalSelfAttention", "FeedForward", "GPTConfig", "GPTEmbedding", "GPTHead",
    "gpt_small", "gpt_tiny", "gpt2_124m", "gpt2_350m", "gpt2_1_3b", "llama_7b", "lm_loss", "MLP", "MLPConfig", "mlp_tiny", "mlp_wide",
    "MoEConfig", "MoEGPT", "gpt_moe", "mixtral_8x7b",
]
