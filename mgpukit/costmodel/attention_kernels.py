"""Which fused-attention kernel a run used, and how fast that kernel runs on its GPU.

A profile's ``[attention]`` table is *one* kernel's rate: the one measured on that GPU. On the
H100/H200 profiles that is torch 2.11's SDPA of 2026 (cuDNN / FlashAttention-3 class, Hopper's
``wgmma`` tensor-core instructions, TMA copies, warp specialisation); on the A100 profiles it is
FlashAttention-2's (Dao 2023). A run on an H100 from 2023 used FlashAttention-2 (or a Triton
kernel of the same generation): it issues Ampere's ``mma.sync`` instructions on Hopper and
reaches about 35 % of the H100's dense bf16 peak where FlashAttention-3 reaches 75 % (Shah et al.
2024, arXiv:2407.08608, §1 and Fig. 5-6). Charging such a run the 2026 kernel's rate makes its
attention ~1.8× too fast — an error that grows with the sequence, as attention's share of the
step does (issue 37: torch-FSDP bf16 runs on 8 H100s over-predicted +27 % at 2K, +40 % at 8K).

The kernel is a property of the run (``Layout.attention_kernel``):

* ``""`` — the profile's own table (the GPU's measured kernel: above);
* ``"fa3"`` — FlashAttention-3 / cuDNN class: the Hopper profiles' own table (Hopper only);
* ``"fa2"`` — FlashAttention-2: the A100 profiles' own table; on Hopper :data:`FA2_HOPPER`.

:data:`FA2_HOPPER` is the profiles' tile model (`kernels._tiled_attention_seconds`) with its
rates read off FA2's bars in the FA3 paper (H100 80GB SXM5, bf16, batch × seq = 16K, heads ×
head dim = 2,048): the forward rate and head-dim term from the **non-causal** forward at 16K
(Fig. 5: hd 64 → 324, hd 128 → 370 TFLOP/s, where the block overhead is amortised), the backward
rate and block overhead from the non-causal hd-128 backward over 512-16K (Fig. 6: 214 … 322).
Held out, the **causal** hd-128 forward (Fig. 5: 191, 260, 298, 319, 333, 335 TFLOP/s at 512 …
16K) comes out 186, 247, 294, 326, 344, 354 (−5 … +6 %), the hd-64 backward (198, 238, 264 at
512 … 2K) 191, 231, 257. No figure of issue 37 enters: the check there uses runs outside the
repository.
"""

from __future__ import annotations

from dataclasses import replace

from mgpukit.costmodel.profile import AttentionModel, HardwareProfile

KERNELS = ("", "fa2", "fa3")
HOPPER = ("h100", "h200")  # profile name prefixes of GH100 GPUs

FA2_HOPPER = AttentionModel(
    forward=0.4624,            # [FA3] Fig. 5: FA2 non-causal forward at 16K, 370 (hd 128) and 324 (hd 64) TFLOP/s
    backward=0.4105,           # [FA3] Fig. 6: FA2 non-causal backward, hd 128, 512 … 16K (214 … 322 TFLOP/s)
    head_dim_half=24.0,        # [FA3] Fig. 5: the hd-64 / hd-128 ratio of the two forward rates above (0.876)
    block_overhead=1.3,        # carried over from the H100 fit (a block's load-q / write-out); the held-out
                               # causal bars agree
    block_overhead_backward=2.0,  # [FA3] Fig. 6 with backward above (worst 1 % over the six bars)
    tail=0.43,                 # carried over from the H100 fit (idle SMs at the end of the longest block)
    tail_backward=0.59,        # carried over
    fp32_forward=0.5,          # as the profiles (FA2 has no fp32 kernel; SDPA falls back to memory-efficient attention)
    fp32_backward=0.4,
    causal_skip=True,          # FlashAttention-2 §3.1
)


def _hopper(profile: HardwareProfile) -> bool:
    return profile.name.split("-")[0] in HOPPER


def check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not known; choose fa2 (FlashAttention-2, 2023) "
                         f"or fa3 (FlashAttention-3 / cuDNN, Hopper), or leave it out for the profile's own")


def with_attention_kernel(profile: HardwareProfile, kernel: str) -> HardwareProfile:
    """``profile`` with ``kernel``'s attention rate (module docstring); the profile itself for
    ``""`` and where its own table is that kernel's. Refuses a kernel the GPU cannot run or a
    profile without an ``[attention]`` table (one line, what to change)."""
    check_kernel(kernel)
    if not kernel:
        return profile
    if profile.attention is None:
        raise ValueError(f"profile {profile.name!r} has no [attention] table, so no kernel generation to choose; "
                         f"drop --attention-kernel")
    if kernel == "fa3":
        if not _hopper(profile):
            raise ValueError(f"FlashAttention-3 runs on Hopper GPUs only (h100-*, h200), not {profile.name!r}; "
                             f"use fa2 or leave the kernel out")
        return profile
    return replace(profile, attention=FA2_HOPPER) if _hopper(profile) else profile


def kernel_label(profile_name: str, kernel: str, *, flash: bool = True) -> str:
    """What attention a run on ``profile_name`` is charged: ``unfused`` (Megatron-2021's softmax),
    ``fa2`` or ``fa3`` — the profile's own table named by its generation when ``kernel`` is ``""``."""
    if not flash:
        return "unfused"
    if kernel:
        return kernel
    return "fa3" if profile_name.split("-")[0] in HOPPER else "fa2" if profile_name.startswith("a100") else "profile"
