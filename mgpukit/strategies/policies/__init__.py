"""Policies: what every strategy can be combined with, applied to the unmodified model before
the strategy's own appliers (`mgpukit.parallelize`, step 2), chosen by the layout's fields.

- `checkpointing.py`  `Layout.checkpointing`: "none" | "full" (every block recomputed) |
                      "selective" (the attention core recomputed)
- `precision.py`      `Layout.dtype`: "fp32" | "bf16" | "fp16" (autocast, fp32 master weights)
"""
