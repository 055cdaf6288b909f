"""Train the kit's GPT with `pp-1f1b` — 1F1B (PipeDream-Flush): one forward, one backward; <= p in flight — the loop in plain sight.

Written by `mgpukit export pp-1f1b`. Launch it with either launcher; on GPUs the processes use
NCCL, without GPUs they form one gloo group of CPU workers:

    accelerate launch --multi_gpu --num_processes 2 train_pp_1f1b.py --steps 20
    torchrun --nproc_per_node 2 train_pp_1f1b.py --steps 20

What each process does:
  1. joins the process group and picks its device (Accelerate's `PartialState`);
  2. checks the run before any work and builds the mesh of its layout (`--dp`, `--tp`, `--pp` …);
  3. builds an unmodified model and applies the strategy to it (`mgpukit.parallelize`: tensor
     parallel → activation checkpointing → pipeline split → data-parallel sync, in that order);
  4. trains: batch → forward + backward → gradient sync → optimizer step → log  (the loop below);
  5. on rank 0, trains one process on the whole batch with no strategy and compares the weights
     (parity: a correct strategy changes where the work runs, not the numbers).

The loop is yours to change. `mgpukit run pp-1f1b` runs the same appliers through the kit's trainer
(`mgpukit/training/trainer.py`), which adds the recorder's timeline, memory by category, hooks
(stragglers, LR rules, checkpoints) and the result record. Why the kit, not Accelerate, wraps the
model: Accelerate's `prepare` applies DDP or FSDP, and its N-D parallelism refuses CPU workers,
while this kit writes each strategy by hand (the lesson) and runs it on CPU and GPU alike; fp16's
loss scaler is the kit's own for the same reason (it unscales sharded gradients too).
"""
import argparse
import contextlib
import time

import torch
import torch.distributed as dist
from accelerate import PartialState

from mgpukit.data import split_microbatches
from mgpukit.measure.recorder import Recorder
from mgpukit.parallelize import parallelize
from mgpukit.prepare import prepare
from mgpukit.run_args import add_config_arguments, add_layout_arguments, config_from_args, layout_from_args
from mgpukit.runtime.context import worker_context
from mgpukit.training.building import Batches, build_model, build_optimizer
from mgpukit.training.trainer import gather_weights

STRATEGY = "pp-1f1b"


def training_function(run, rank: int, world_size: int, device: torch.device) -> dict | None:
    """Train the checked run `run` on this process's share; returns the full weights on rank 0."""
    cfg = run.cfg
    ctx = worker_context(rank=rank, world_size=world_size, device=device, t0=time.perf_counter(),
                         mode="gpu" if device.type == "cuda" else "cpu", threads=torch.get_num_threads(),
                         dims=run.dims, layout=run.layout)                    # 2. the mesh
    rec = Recorder(ctx)  # every collective goes through it (bytes counted per mesh axis)
    torch.manual_seed(cfg.seed)  # every rank builds the same initial weights
    parts = parallelize(build_model(cfg), cfg, ctx, rec, run.strategy)    # 3. the appliers
    optimizer = build_optimizer(cfg, parts.params, ctx)  # over this rank's (sharded) parameters
    batches = Batches(cfg, *ctx.batch_coords)  # this rank's slice of each step's global batch

    for step in range(cfg.steps):                                         # 4. the loop
        start = time.perf_counter()
        x, y = (t.to(ctx.device) for t in batches(step))
        if parts.loss_of is None:  # a pipeline, or torch's tp: its engine runs each micro-batch
            loss_sum = parts.engine.forward_backward(x, y)
        else:  # a whole replica: k micro-batches (gradient accumulation), one gradient sync
            k, loss_sum = ctx.layout.num_micro_batches, 0.0
            for i, (xm, ym) in enumerate(split_microbatches(x, y, k)):
                with parts.sync.no_sync() if i < k - 1 else contextlib.nullcontext():  # last: sync
                    loss = parts.loss_of(xm, ym) / k  # forward and loss: the mean over the k
                    loss.backward()  # backward (DDP: each full bucket's all-reduce starts here)
                loss_sum += loss.detach()
        parts.sync.sync(step)  # gradients averaged over dp (DDP did it inside backward: a wait)
        finite = parts.scaler.unscale_(parts.params) if parts.scaler is not None else True
        if finite:  # fp16 only: an overflowing step is skipped and the scale halved
            optimizer.step()
        optimizer.zero_grad(set_to_none=parts.sync.frees_grads)  # a bucketed sync keeps .grad views
        if parts.after_step is not None:
            parts.after_step(step)  # ZeRO: all-gather the updated shards
        if parts.scaler is not None:
            parts.scaler.update(finite)
        print_loss(step, loss_sum, parts, ctx, time.perf_counter() - start)
    return gather_weights(rec, ctx, parts)


def print_loss(step: int, loss, parts, ctx, seconds: float) -> None:
    """The global batch's loss on rank 0: the loss-holding ranks' shares, averaged over replicas."""
    share = torch.tensor([float(loss) / ctx.size("dp") if parts.holds_loss and loss is not None else 0.0])
    if dist.is_initialized() and ctx.world_size > 1:
        dist.all_reduce(share)
    if ctx.rank == 0:
        print(f"step {step:3d}  loss {share.item():.4f}  {seconds * 1e3:7.1f} ms", flush=True)


def check_parity(weights: dict, run) -> bool:
    """Rank 0, after the group is gone: one process, no strategy, the same loop and batches."""
    print("the same run on one process, no strategy:")
    alone = prepare("single", workers=1, mode="cpu", config=run.cfg.replace(options={}, layout=None))
    reference = training_function(alone, rank=0, world_size=1, device=torch.device("cpu"))
    weights = {k: w.cpu() for k, w in weights.items()}
    worst = max((weights[k] - reference[k]).abs().max().item() for k in reference)
    try:
        torch.testing.assert_close(weights, reference)  # fp32: torch's default tolerances
    except AssertionError:
        print(f"parity FAILED: the weights differ from one process's by up to {worst:.1e}")
        return False
    print(f"parity ok: after {run.cfg.steps} steps the weights match one process's (max |diff| {worst:.1e})")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)  # the same flags as `mgpukit run` (mgpukit/run_args.py)
    add_layout_arguments(parser)
    parser.add_argument("--no-parity", action="store_true", help="skip the one-process check")
    args = parser.parse_args()
    state = PartialState(cpu=not torch.cuda.is_available())  # 1. the group and the device
    try:  # every check before any work: a run that cannot go is one line, exit code 2
        run = prepare(STRATEGY, workers=state.num_processes, mode="cpu",
                      config=config_from_args(args), layout=layout_from_args(args))
    except ValueError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    weights = training_function(run, state.process_index, state.num_processes, state.device)
    if dist.is_initialized():  # leave together, then rank 0 checks alone
        dist.barrier()
        dist.destroy_process_group()
    ok = weights is None or args.no_parity or check_parity(weights, run)    # 5. parity
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
