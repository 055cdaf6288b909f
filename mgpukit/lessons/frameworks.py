"""Notebook 10 and the README, the frameworks map: each system the background articles name,
what it is, and where its idea runs in the kit (notebook and module).

`FRAMEWORKS` is the one list; `frameworks_markdown` prints it as the table the README carries
(`tests/test_spot.py` holds the two equal and checks that every module and notebook named exists).
"""
from __future__ import annotations

FRAMEWORKS = [
    # (system, what it is, its idea here, notebook, module)
    ("PyTorch DataParallel", "one process drives every GPU; scatters inputs, replicates the model each step, "
     "gathers outputs on GPU 0 (the GIL and GPU 0 are the bottleneck) — DDP replaced it",
     "one process per GPU, gradients all-reduced", "01_data_parallel", "mgpukit/strategies/data_parallel/naive.py"),
    ("PyTorch DDP", "one process per GPU, bucketed all-reduce overlapped with backward",
     "`ddp` (through Accelerate), `dp-bucketed` by hand", "01_data_parallel", "mgpukit/strategies/data_parallel/ddp.py"),
    ("Horovod", "ring all-reduce over MPI/NCCL, tensor fusion", "ring all-reduce written from send/recv; fusion = buckets",
     "02_communication", "mgpukit/strategies/communication/collectives.py"),
    ("NVIDIA Apex (amp)", "mixed precision with loss scaling (now in PyTorch)", "`torch.amp` autocast, dtype=bf16/fp16 + loss scaler",
     "07_memory_and_precision", "mgpukit/strategies/policies/precision.py"),
    ("DeepSpeed", "Microsoft's training engine: ZeRO stages 1-3, ZeRO-Offload, its own launcher",
     "the kit never runs DeepSpeed: its ideas are `zero1`/`zero2`/`zero3` written by hand and PyTorch's "
     "`fsdp2` (with CPU offload)", "06_sharding", "mgpukit/strategies/sharding/"),
    ("NCCL vs gloo", "GPU collectives (NVLink/IB) vs CPU/TCP collectives", "same code: NCCL on GPUs, gloo on CPU workers",
     "02_communication", "mgpukit/runtime/launcher.py"),
    ("GPipe / PipeDream", "GPipe: micro-batches, flush every step; PipeDream: 1F1B, asynchronous, with weight "
     "stashing (several weight versions in flight, no flush)", "`pp-gpipe`; `pp-1f1b` is PipeDream-Flush "
     "(synchronous 1F1B, one weight version); interleaved, zero-bubble", "04_pipeline_parallel",
     "mgpukit/strategies/pipeline/"),
    ("TF MirroredStrategy", "synchronous data parallelism in TensorFlow", "DDP", "01_data_parallel",
     "mgpukit/strategies/data_parallel/ddp.py"),
    ("TF TPUStrategy", "synchronous data parallelism over TPU cores (all-reduce of gradients)", "DDP",
     "01_data_parallel", "mgpukit/strategies/data_parallel/ddp.py"),
    ("Kubernetes / Slurm", "schedule and launch the workers of a job on many nodes", "the exported script under "
     "`torchrun --nnodes` or `accelerate launch --num_machines`, one per node from a Slurm batch script; "
     "the mesh knows the nodes", "02_communication", "scripts/slurm/train.sbatch"),
    ("Accelerate LocalSGD", "H local steps, then average the weights", "`local-sgd` (impl=ours or accelerate)",
     "10_beyond", "mgpukit/strategies/data_parallel/local_sgd.py"),
]


def frameworks_markdown(link_prefix: str = "", *, links: bool = True) -> str:
    """The map as a Markdown table (the README carries the same table). ``links=False`` names the
    notebook and the module as plain text (`notebooks/10_beyond.ipynb` shows it in a markdown cell,
    where a path is read from the repository's root)."""
    lines = ["| system | what it is | here | notebook | module |", "|---|---|---|---|---|"]
    for name, what, here, nb, module in FRAMEWORKS:
        where = (f"[{nb}]({link_prefix}notebooks/{nb}.ipynb) | [`{module}`]({link_prefix}{module})" if links
                 else f"{nb} | `{module}`")
        lines.append(f"| {name} | {what} | {here} | {where} |")
    return "\n".join(lines)
