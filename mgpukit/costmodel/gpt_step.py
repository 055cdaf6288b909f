"""Analytic step time of mgpukit's own GPT on a hardware profile — in closed form, no run.

This is the "analytic" end of the validation chain (docs/ARCHITECTURE.md, "Four clocks"): the
same roofline the emulator charges op by op (`mgpukit.measure.vclock`), written down as formulas in the model's
sizes, so that *analytic ≈ emulated* tests the emulator's plumbing (clock joins, collective
start times, overlap) rather than restating it. The kernels of a step, their times and the
host that issues them are `mgpukit.costmodel.gpt_ops`' (notation and every term there); this
module puts them together into a DDP step and a pipeline step.

**Data parallel (torch DDP)**: the reducer copies each gradient into its bucket (``2eP``, one
kernel per tensor), our comm hook divides the bucket by ``n`` (``2eP``, one per bucket), the
bucket is ring all-reduced (``2(n-1)/n · B/β + 2(n-1)·α``, `mgpukit.costmodel.comm`), and the
averaged buckets are copied back into ``.grad`` (``2eP``, one per tensor) after backward. The
reducer finalises bucket by bucket — wait on the bucket's future, copy it back
(``Reducer::finalize_backward`` in torch's ``reducer.cpp``; on a GPU the wait is a stream wait)
— so the buckets already reduced are copied back while the last bucket's all-reduce is still
running: of that all-reduce only what outlasts the other buckets' copy-back is exposed. After its first step DDP re-buckets the
gradients in the order backward produced them: a first bucket of about 1 MiB (``lm_head``,
``ln_f``, the last ``fc2``, …), then buckets of up to 25 MiB. A bucket is ready only when
*every* gradient in it is, so the last bucket (it holds the embeddings, the last gradients of
backward) is all-reduced after backward: **its all-reduce is exposed**, less the copy-back
above. ``gpt-tiny``'s 0.85 MB of gradients are one bucket, so its whole all-reduce is exposed;
``gpt-small``'s first 1.1 MB bucket overlaps the rest of backward and hides (only the part that
would outlast backward is charged). Step = forward + backward + DDP copies + exposed
all-reduce + optimizer.

**Pipeline (GPipe / 1F1B)**, ``p`` stages of ``L/p`` layers (stage 0 adds the embedding, the last
the head and loss), ``m`` micro-batches of ``N_mb`` tokens: per-stage forward and backward times
``F_s``, ``B_s`` from `gpt_ops`' terms, and one message per boundary and micro-batch (the
activation forward, its gradient back), ``h = α + e·N_mb·d/β``. A rank sends its messages one
after another, so a link is a station of the line too.

- GPipe runs a wave of forwards then a wave of backwards. Identical jobs through a line of
  stations finish after ``Σ stations + (m-1)·max station`` (the bottleneck paces the rest):
  ``Σ_s F_s + (p-1)h + (m-1)·max(max_s F_s, h)``, then the same with ``B_s``. For equal
  stages and ``h = 0``: ``(m + p - 1)(F + B)``, whose idle share is the bubble ``(p-1)/(m+p-1)``.
- 1F1B has the same fill and drain, ``Σ_s (F_s + B_s) + 2(p-1)h + (m-1)·max_s (F_s + B_s)``, but
  cannot hide all the latency: a stage's backward waits on the next stage's backward right
  after it, so round trips stall the steady state. Counting them on the schedule table
  (`mgpukit.costmodel.simulate` with a p2p cost reproduces it exactly for equal stages) gives
  ``2h · (p - 2 + k - ⌊(k + p - 2)/p⌋)`` more for ``k = m - p ≥ 0``: about ``2(p-1)/p · h`` per
  micro-batch. Assumes compute-bound stages (``F_s ≥ h``); with a latency-bound link the
  sends' queueing dominates and this form underestimates.

Rank 0 (whose times the record reports) ends the step with the last backward, then steps its
optimizer over its own stage's parameters.
"""

from __future__ import annotations

from mgpukit.costmodel.comm import allreduce_time, link_for_ranks, p2p_time
from mgpukit.costmodel.gpt_ops import (FP32, Stream, kernel_seconds, linear_ops, memory_op, param_tensors,
                                       per_tensor_ops, sgd_ops, stage_ops, stream_seconds)
from mgpukit.costmodel.profile import HardwareProfile

DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb=25
DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def ddp_buckets(cfg, *, first_bytes: float = DDP_FIRST_BUCKET_BYTES,
                bucket_bytes: float = DDP_BUCKET_BYTES) -> list[float]:
    """Bytes of each DDP bucket, in the order backward fills them (DDP's rebuilt buckets:
    parameters in gradient-ready order; a bucket closes once it reaches its cap)."""
    return [FP32 * sum(bucket) for bucket in _bucket_members(cfg, first_bytes, bucket_bytes)]


def _bucket_members(cfg, first_bytes: float, bucket_bytes: float) -> list[list[int]]:
    """The parameter tensors (element counts, backward order) of each DDP bucket."""
    buckets, current = [], []
    for numel in param_tensors(cfg, layers=cfg.n_layer, embed=True, head=True):
        current.append(numel)
        if FP32 * sum(current) >= (first_bytes if not buckets else bucket_bytes):
            buckets.append(current)
            current = []
    return buckets + ([current] if current else [])


def ddp_step_time(cfg, *, global_batch: int, workers: int, profile: HardwareProfile,
                  first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
                  bucket_bytes: float = DDP_BUCKET_BYTES) -> dict[str, float]:
    """Seconds of one steady-state DDP step of the GPT `cfg` (a `GPTConfig`) on `workers`
    ranks of `profile`, SGD with momentum; see the module docstring for every term.

    Returns ``forward_s``, ``backward_s``, ``ddp_copies_s``, ``allreduce_s`` (all buckets),
    ``exposed_comm_s``, ``optimizer_s``, ``total_s``, and the FLOP/byte totals behind them.
    """
    if global_batch % workers:
        raise ValueError(f"global_batch={global_batch} does not split over {workers} workers.")
    b = global_batch // workers
    # the kit's trainer frees DDP's (and one replica's) gradients between steps: no accumulation
    # into .grad in backward, no zero_ after the optimizer (`training.trainer`, `frees_grads`)
    ops = stage_ops(cfg, b, layers=cfg.n_layer, embed=True, head=True, accumulate=False)
    P = ops["params"]
    link = link_for_ranks(range(workers), profile)
    members = _bucket_members(cfg, first_bucket_bytes, bucket_bytes)
    buckets = [FP32 * sum(bucket) for bucket in members]
    times = [allreduce_time(nbytes, workers, link) for nbytes in buckets]
    # DDP's copies (module docstring): each gradient into its bucket and each bucket divided by
    # n during backward; each bucket copied back into the gradients after it — one kernel per
    # tensor / bucket. The reducer finalises bucket by bucket (wait on its future, copy it back):
    # the buckets already reduced are copied back while the last one's all-reduce is on the wire.
    tensors = ops["tensors"]
    many = workers > 1
    # both issued by gradient hooks (the reducer's, the comm hook): no autograd node of their
    # own, so the host pays a no_grad op for each (`op_cost.op_context`)
    copy_in = per_tensor_ops(tensors, 2 * FP32, "no_grad") if many else []
    divide = [memory_op(2 * nbytes, "no_grad") for nbytes in buckets] if many else []
    copy_back = per_tensor_ops(tensors, 2 * FP32, "no_grad") if many else []  # after the engine's last node
    copy_back_others = per_tensor_ops([p for bucket in members[:-1] for p in bucket], 2 * FP32)
    # Earlier buckets run while backward goes on, from when the first is ready (the head's and
    # the last fc2's gradients exist) to backward's end; what does not fit is exposed.
    head = stage_ops(cfg, b, layers=0, embed=False, head=True)["bwd"][:-len(param_tensors(cfg, layers=0, embed=False, head=True))]
    first = len(head) + len(linear_ops(b * cfg.seq_len, cfg.d_ff, cfg.d_model, bias=cfg.bias)[1])
    stream = Stream(profile)
    forward = stream.run(ops["fwd"])
    first_ready = stream.run(ops["bwd"][:first])
    backward_end = stream.run(ops["bwd"][first:] + copy_in + divide)
    if many and profile.async_launch:  # the host issues each bucket's all-reduce
        stream.host += len(buckets) * profile.collective_launch
    exposed = (max(0.0, sum(times[:-1]) - (backward_end - first_ready))
               + max(0.0, times[-1] - kernel_seconds(copy_back_others, profile))) if many else 0.0
    stream.wait(backward_end + exposed)
    stream.run(copy_back)
    optimizer = sgd_ops(tensors, foreach=profile.async_launch, zero=False)  # a GPU's default: foreach
    stream.run(optimizer)
    every = ops["fwd"] + ops["bwd"] + copy_in + divide + copy_back + optimizer
    out = {
        "forward_s": forward,
        "backward_s": backward_end - forward,
        "ddp_copies_s": kernel_seconds(copy_in + divide + copy_back, profile),
        "allreduce_s": sum(times),
        "exposed_comm_s": exposed,
        "optimizer_s": kernel_seconds(optimizer, profile),
        "kernels_s": kernel_seconds(every, profile),
        "host_s": sum(op.host_seconds(profile) for op in every)
                  + (len(buckets) * profile.collective_launch if many else 0.0),
        "buckets": len(buckets),
        "matmul_flops": sum(op.flops for op in ops["fwd"] + ops["bwd"]),
        "bytes": sum(op.bytes for op in ops["fwd"] + ops["bwd"]),
        "params": P,
        "total_s": stream.sync(),
    }
    out["launch_bound"] = out["host_s"] / out["total_s"]
    return out


def one_f_one_b_stalls(p: int, m: int) -> int:
    """Round trips (``2h`` each) a 1F1B step of ``m ≥ p`` micro-batches on ``p`` stages waits out."""
    k = m - p
    return max(0, p - 2) + k - (k + p - 2) // p


def pipeline_step_time(cfg, *, global_batch: int, micro_batches: int, stages: int,
                       profile: HardwareProfile, schedule: str = "gpipe",
                       stage_layers: tuple[int, ...] | None = None) -> dict[str, float]:
    """Seconds of one GPipe / 1F1B step over `stages` ranks, as rank 0 sees it (module
    docstring, last paragraph): the last micro-batch's backward leaves stage 0, then stage 0
    steps its optimizer. `stage_layers`: layers per stage of an uneven split (default equal)."""
    if schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"schedule={schedule!r}: this closed form covers 'gpipe' and '1f1b'.")
    if stage_layers is None:
        if cfg.n_layer % stages:
            raise ValueError(f"{cfg.n_layer} layers do not split into {stages} stages.")
        stage_layers = (cfg.n_layer // stages,) * stages
    if len(stage_layers) != stages or sum(stage_layers) != cfg.n_layer or min(stage_layers) < 1:
        raise ValueError(f"stage_layers={tuple(stage_layers)!r}: {stages} positive counts adding up to {cfg.n_layer}.")
    if global_batch % micro_batches:
        raise ValueError(f"global_batch={global_batch} does not split into {micro_batches} micro-batches.")
    p, m, mb = stages, micro_batches, global_batch // micro_batches
    per_stage = [stage_ops(cfg, mb, layers=stage_layers[s], embed=s == 0, head=s == p - 1)
                 for s in range(p)]
    # Each stage's forward and backward of one micro-batch. On a CPU worker the host's dispatch
    # adds to every kernel (`stream_seconds`); on a GPU the host runs ahead of its stream and does
    # not wait for the neighbours' messages (a recv is a stream wait), so the schedule below runs
    # on the kernels alone and a stage's host, issuing all its micro-batches back to back, is a
    # second bound: the step is the later of the two.
    timed = stream_seconds if not profile.async_launch else kernel_seconds
    fwd = [timed(o["fwd"], profile) for o in per_stage]
    bwd = [timed(o["bwd"], profile) for o in per_stage]
    host = [m * sum(op.host_seconds(profile) for op in o["fwd"] + o["bwd"])
            + 2 * m * profile.collective_launch * ((s > 0) + (s < p - 1))  # its sends and recvs
            for s, o in enumerate(per_stage)] if profile.async_launch else [0.0] * p
    hop = p2p_time(FP32 * mb * cfg.seq_len * cfg.d_model, link_for_ranks([0, 1], profile))
    if schedule == "gpipe":  # a wave of forwards, then a wave of backwards
        pipeline = (sum(fwd) + (p - 1) * hop + (m - 1) * max(max(fwd), hop)
                    + sum(bwd) + (p - 1) * hop + (m - 1) * max(max(bwd), hop))
    else:
        if m < p:
            raise ValueError(f"1F1B with m={m} < p={p} micro-batches never reaches its steady state.")
        # fill + drain + steady state, plus the round trips 1F1B cannot hide (see docstring)
        pipeline = (sum(fwd) + sum(bwd) + 2 * (p - 1) * hop
                    + (m - 1) * max(f + b for f, b in zip(fwd, bwd)) + 2 * hop * one_f_one_b_stalls(p, m))
    pipeline = max(pipeline, max(host))
    opt = stream_seconds(sgd_ops(per_stage[0]["tensors"], foreach=profile.async_launch), profile)
    return {"stage_fwd_s": fwd, "stage_bwd_s": bwd, "stage_host_s": host, "hop_s": hop, "pipeline_s": pipeline,
            "optimizer_s": opt, "total_s": pipeline + opt,
            "bubble_fraction": (p - 1) / (m + p - 1)}
