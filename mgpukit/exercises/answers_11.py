"""The expected answers of notebook 11's exercises: context and expert parallelism, each
computed by the library (`costmodel.cp_ep` through `lessons.long_context`)."""
from __future__ import annotations

from mgpukit.config import RunConfig
from mgpukit.exercises.registry import add
from mgpukit.lessons import long_context as lc

add("11.ring-bytes", lambda: lc.ring_bytes("gpt-tiny", cp=2, rows=8), rel=0.01,
    hint="per layer: forward sends K and V once (cp − 1 = 1 hop), backward sends K, V, dK, dV once and "
         "then dK, dV home; one K block is rows × T/cp × d_model × 4 bytes",
    why="S = 8 × 32 × 64 × 4 = 65,536 B; per layer 2S forward + (4S + 2S) backward = 8S; 4 layers: 32S",
    mistakes=((lambda: lc.ring_bytes("gpt-tiny", cp=2, rows=8) / 4,
               "that is one layer's (or the forward's alone): 4 layers, and backward moves dK, dV too"),))
add("11.capacity", lambda: lc.capacity("gpt-moe", seq_len=1000), rel=0.0,
    hint="⌈capacity factor × top-k × tokens per sequence / experts⌉ — a slot is a whole token",
    why="⌈1.25 × 2 × 1,000 / 8⌉ = ⌈312.5⌉ = 313 slots per expert per sequence (GShard §2.2)",
    mistakes=((lambda: 312, "a slot holds a whole token: round 312.5 up, not down"),))
add("11.all-to-alls", lambda: 4 * RunConfig(model="gpt-moe").model_config().n_layer, rel=0.0,
    hint="dispatch and combine per MoE layer in forward, and the backward of each",
    why="4 per MoE layer (2 forward, 2 backward) × 4 layers = 16")
