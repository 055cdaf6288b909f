"""The workloads: a tiny GPT and an MLP. Plain modules; no parallelism inside."""

from mgpukit.models.gpt import (
    GPT,
    Block,
    CausalSelfAttention,
    FeedForward,
    GPTConfig,
    GPTEmbedding,
    GPTHead,
    gpt_small,
    gpt_tiny,
    lm_loss,
)
from mgpukit.models.mlp import MLP, MLPConfig, mlp_tiny, mlp_wide

__all__ = [
    "GPT", "Block", "CausalSelfAttention", "FeedForward", "GPTConfig", "GPTEmbedding", "GPTHead",
    "gpt_small", "gpt_tiny", "lm_loss", "MLP", "MLPConfig", "mlp_tiny", "mlp_wide",
]
