"""The expected answers of notebooks 00-04's exercises: data parallelism, communication,
compression, pipelines — each computed by the library when checked (`registry`).

The small helpers first (a ring's bytes for the tiny GPT, an all-reduce's time on an H100
link, DDP's buckets at a cap, a pipeline's bubble), then the exercises notebook by notebook:
its value, a hint, why the answer is what it is, and the slips a wrong answer usually makes.
"""
from __future__ import annotations

from mgpukit.config import RunConfig
from mgpukit.costmodel import get_shape, param_count
from mgpukit.costmodel.comm import allreduce_time, bus_factor
from mgpukit.costmodel.hardware import Link, load_profile
from mgpukit.costmodel.pipeline import bubble_fraction
from mgpukit.costmodel.schedules import build_schedule, max_in_flight
from mgpukit.exercises.debugging import unsynced_numel
from mgpukit.exercises.registry import add
from mgpukit.exercises.suspects import ANSWERS, refutations
from mgpukit.runtime.dims import ParallelDims
from mgpukit.strategies.compression import theory
from mgpukit.strategies.data_parallel.bucketed import build_buckets
from mgpukit.strategies.data_parallel.theory import dp_theory
from mgpukit.training.building import build_model


# ---------------------------------------------------------------- helpers

def _dp_bytes(n: int) -> float:
    return dp_theory(RunConfig(), ParallelDims(dp=n))["comm_bytes"]


def _psi() -> int:
    return param_count(get_shape("gpt-tiny"))


def _bus(n: int) -> float:
    return bus_factor("all_reduce", n)


def _h100_link():
    return load_profile("h100-nvlink").intra_node


def _allreduce_us(nbytes: float, n: int) -> float:
    return allreduce_time(nbytes, n, _h100_link()) * 1e6


def _buckets_at(bucket_mb: float) -> int:
    return len(build_buckets(list(build_model(RunConfig()).parameters()), bucket_mb * 2**20))


def _ring_busbw_gbps(nbytes: float, n: int) -> float:
    return _bus(n) * nbytes / (_allreduce_us(nbytes, n) * 1e-6) / 1e9


def topk_ratio_tying_fp16(n: int = 2, *, alpha: float = 15e-6, beta: float = 1.1e9) -> float:
    """The top-k ratio whose exchange takes as long as fp16's on a link (α, β): bisection
    on the alpha-beta times of `compression.theory` (gpt-tiny, `n` workers)."""
    shapes, link = theory.param_shapes(RunConfig()), Link(alpha=alpha, beta=beta)
    fp16 = theory.plan_time(theory.exchange_plan("fp16", shapes, n), n, link)
    lo, hi = 1e-4, 1.0
    for _ in range(60):  # top-k's time grows with its ratio
        mid = (lo * hi) ** 0.5
        t = theory.plan_time(theory.exchange_plan("topk", shapes, n, ratio=mid), n, link)
        lo, hi = (mid, hi) if t < fp16 else (lo, mid)
    return (lo * hi) ** 0.5


def _bubble(schedule: str, p: int, m: int, v: int = 1) -> float:
    return bubble_fraction(schedule, p, m, v)


def _in_flight(p: int, m: int, rank: int) -> list[int]:
    return [max_in_flight(build_schedule(s, p, m), rank) for s in ("gpipe", "1f1b")]


def _mystery(name: str) -> int:
    """The suspect (as numbered by `suspects`) that explains quiz `name`'s broken variant."""
    return ANSWERS[name]


def _quiz(nn: str, *, hint: str, why: str) -> None:
    """Register debugging quiz `nn`: the answer is a suspect's number, a wrong suspect is told
    which printed number rules it out."""
    add(f"{nn}.debug", lambda: _mystery(nn), rel=0.0, choice=True, mistakes=refutations(nn), hint=hint, why=why)


# ---------------------------------------------------------------- 00 · start here

add("00.ring-bytes", lambda: _dp_bytes(4), rel=1e-3,
    hint="2(n−1)/n × 4 bytes × Ψ, with n = 4 and Ψ from section 3",
    why="a ring all-reduce is a reduce-scatter then an all-gather: 2(n−1) messages of 4Ψ/n bytes.",
    mistakes=((lambda: 4 * _psi(), "that is one copy of the gradients: the ring sends 2(n−1)/n of it."),
              (lambda: 2 * 4 * _psi(), "2 × 4Ψ is the limit for large n; at n = 4 the factor is 2·3/4."),
              (lambda: 2 * 3 / 4 * _psi(), "Ψ counts parameters; each fp32 gradient is 4 bytes.")))
add("00.missing-average", lambda: "grad_norms",
    hint="the loss of step 0 is computed before any update; the gradient norm is measured after the all-reduce",
    why="summing without dividing by n makes every gradient n× too large at once; the loss only "
        "changes after the first (too large) update.",
    mistakes=(("losses", "step 0's loss comes from the initial weights, before any gradient is used."),))
add("00.bytes-growth", lambda: _bus(16) / _bus(2), rel=1e-3,
    hint="evaluate 2(n−1)/n at n = 16 and at n = 2, then divide",
    why="2(n−1)/n is 1 at n = 2 and tends to 2: the bytes per rank grow by less than 2× however many ranks.",
    mistakes=((8.0, "that is the ratio of the rank counts; the bytes per rank barely depend on n."),))
add("00.predict-ddp-3", lambda: _dp_bytes(3), rel=0.01,
    hint="the formula of section 3 at n = 3: 2(n−1)/n × 4Ψ",
    why="DDP's buckets are all-reduced by the backend's ring: 2·2/3 × 4Ψ bytes per rank per step.",
    mistakes=((lambda: _dp_bytes(2), "that is the 2-worker figure; at n = 3 the factor is 2·2/3 = 4/3."),))
_quiz("00",
    hint="work out what each suspect sends per step (section 3: 2(n−1)/n · 4 bytes per synced value) and find it in the table; then ask whether that row's differences have the shape the suspect leaves — a rounding moves every column a little; a tensor never synced moves the weights far more than the losses.",
    why="suspect 3: variant B all-reduces only the Linear and Embedding tensors, so its 18 LayerNorm vectors (4,608 B of the 849,408) are never synced: each rank updates them from its own half-batch and they drift apart (its weights Δ, far above its own loss and gradient-norm Δs) while the losses and gradient norms still match. Suspect 1 would send every byte (the exact row does); suspect 4 would leave out 16 KiB, not 4.5; suspect 2 sends half the bytes like variant C — but C is the bf16 exchange, whose differences are a rounding's in every column, far too small for half a model never synced.")

# ---------------------------------------------------------------- 01 · data parallelism

add("01.allreduce-time", lambda: _allreduce_us(4 * _psi(), 4), rel=0.02,
    hint="2(n−1)·α + 2(n−1)/n · bytes/β, with n = 4; the gradients are 4Ψ bytes (Ψ: notebook 00, section 3)",
    why="at this size the 6 latencies (12 µs) are most of it: the tiny GPT's all-reduce is latency-bound.",
    mistakes=((lambda: 6 * 2.0, "that is the latency term alone; add 2(n−1)/n · bytes/β."),
              (lambda: _allreduce_us(4 * _psi(), 8), "that is on 8 GPUs; here n = 4.")))
add("01.linear-scaling", lambda: 0.1 * 8192 / 256, rel=1e-3,
    hint="k = 8192 / 256; multiply the rate by k",
    why="Goyal et al.'s rule for SGD: the batch grew 32×, so the rate does — with 5 epochs of warmup.")
add("01.straggler-idle", lambda: (1.5 - 1) / 1.5, rel=1e-2,
    hint="the step lasts as long as the slow rank's compute; a fast rank computes for 1/1.5 of it",
    why="the all-reduce waits for the slowest rank: a fast rank idles 0.5 of every 1.5.",
    mistakes=((0.5, "0.5 is the extra time relative to a fast rank's compute; as a share of the step divide by 1.5."),))
add("01.predict-buckets", lambda: _buckets_at(0.2), rel=0.0, abs_tol=0.0,
    hint="buckets fill in backward order and close once they hold ≥ 0.2 MiB; the gradients are "
         "0.81 MiB in 69 tensors — count with `build_buckets` or reason from the sizes",
    why="a bucket closes only after the tensor that takes it past the cap, so a bucket can overshoot "
        "the cap by up to one tensor — the MLP's weight matrices are the largest — and the last bucket "
        "takes whatever is left; print `build_buckets`' sizes to see each overshoot.")

_quiz("01",
    hint='what does each suspect send per step (2(n−1)/n · 4Ψ with the skipped values left out; top-k: notebook 03)? Find the rows; a compressor misses parity by design — which row sends a little less than every gradient, and what does the gap say was left out?',
    why="suspect 1: variant A never all-reduces one parameter tensor: each rank updates it from its own half-batch, so gradient norms and weights drift from step 0 while the bytes barely change (one tensor of 69 is missing; Q6 asks how large it is). The LayerNorms (suspect 2) would be 4.5 KiB; the sum without 1/n (suspect 3) sends every byte — the exact row does. Variant B is top-k with error feedback (suspect 4's bytes): farther from the reference than A in losses and gradient norms, by design, not a bug.")
add("01.never-synced", lambda: unsynced_numel("01"), rel=0.0,
    hint="the bytes it did not send, at n = 2 (the ring factor 2(n−1)/n is 1), over 4 bytes per fp32 value",
    why="one 256 × 64 matrix, the first block's MLP up-projection: variant A's sync skips it, and "
        "every rank updates it from its own half-batch.")

# ---------------------------------------------------------------- 02 · communication

add("02.ring-gib", lambda: _bus(8) * 1.0, rel=0.02,
    hint="reduce-scatter then all-gather, each n−1 steps of B/n bytes",
    why="2(n−1)/n × 1 GiB = 1.75 GiB at n = 8.",
    mistakes=((2.0, "2 B is the limit as n grows; at n = 8 it is 2·7/8."),
              (1.0, "that is one reduce-scatter (or one all-gather): an all-reduce is both.")))
add("02.ring-time", lambda: _allreduce_us(2 * 2**20, 8), rel=0.02,
    hint="2(n−1)·α + 2(n−1)/n · B/β, with B = 2 MiB = 2 · 2²⁰ bytes",
    why="28 µs of latency plus ~10 µs of bandwidth: at 2 MiB on NVLink latency is still most of the time.",
    mistakes=((lambda: _allreduce_us(2**20, 8), "that is for 1 MiB; the message here is 2 MiB."),))
def _ps_update(workers: int, s: int, u: int, psi: int) -> list[int]:
    """[worker, version, bytes] of 9.3: update u of the round-robin server (param_server's module
    docstring: worker 1 + u mod (n−1), computed on version max(0, u − s)), and ps-sync's bytes
    through the server's link per step (every worker pushes and pulls 4Ψ)."""
    return [1 + u % workers, max(0, u - s), 2 * workers * 4 * psi]


add("02.param-server", lambda: _ps_update(4, 2, 10, 1_000_000), rel=1e-3,
    hint="round-robin from worker 1: update u is worker 1 + u mod 4's; a gradient as stale as the bound "
         "allows was computed s updates before it is applied; each worker pushes 4Ψ bytes and pulls 4Ψ",
    why="update 10 is worker 1 + 10 mod 4 = 3's, computed on version 10 − 2 = 8 (its staleness is the "
        "bound, min(u, s) = 2). The server's link carries every worker's push and pull: 2 · workers · 4Ψ "
        "bytes per step, growing with n where a ring's 2(n−1)/n · 4Ψ per rank does not.")
add("02.predict-busbw", lambda: _ring_busbw_gbps(2**20, 4), rel=0.03,
    hint="busbw = 2(n−1)/n · bytes / time, time = 2(n−1)·α + 2(n−1)/n · bytes/β (h100-nvlink: α = 2 µs, β = 370 GB/s)",
    why="at 1 MiB the 6 latencies still cost about as much as the bytes: busbw is far below β.")
_quiz("02",
    hint="which collective sends which bytes: an all-reduce 2(n−1)/n of the buffer, a broadcast (n−1)/n — and a 16-bit exchange half of the fp32 one. Two suspects send the same bytes: which one's differences are those of a rounding?",
    why="suspect 4: variant C broadcasts rank 0's gradient instead of all-reducing — a broadcast sends (n−1)/n of the buffer, half an all-reduce's bytes — and every rank then steps on rank 0's half-batch gradient: its gradient norms and weights move far beyond any rounding. An fp16 exchange (suspect 3) sends the same half, but it only rounds. Variant B is top-k with error feedback: larger differences in two columns and 1/50 of the bytes — a compressor, which misses parity by design.")

# ---------------------------------------------------------------- 03 · compression

add("03.topk-4", lambda: 1 / (4 * 0.01), rel=0.02,
    hint="(n−1)·8k against 2(n−1)/n·4P, with k = ratio·P",
    why="an all-gather sends n−1 payloads: the saving 1/(n·ratio) halves from 2 to 4 workers.")
add("03.powersgd", lambda: 2 * (256 + 64), rel=0.0,
    hint="P is rows × r, Q is cols × r",
    why="r(rows + cols) = 640 numbers instead of 16 384: 25.6× fewer for this matrix.")
add("03.int8-16", lambda: 8 / 16 / (1 + 4 / 1024), rel=0.02,
    hint="(n−1)(P + 4P/1024) against 2(n−1)/n · 4P, with n = 16",
    why="8/n × a little less for the scales: on 16 workers the all-gathered int8 codes send twice "
        "fp32's bytes (on 8 they save nothing).",
    mistakes=((4.0, "4× is int8 against fp32 per value; the all-gather sends n−1 payloads."),
              (8 / 8 / (1 + 4 / 1024), "that is on 8 workers; here n = 16."),))
# rel = 1 %: the bytes-only ratio 0.25 (8k against 2 bytes × 2(n−1)/n · Ψ) is 3.7 % low, so only a
# prediction that counts the α term top-k's single all-gather hop saves passes (issue 35).
add("03.predict-topk-tie", lambda: topk_ratio_tying_fp16(2), rel=0.01,
    hint="on 2 workers: top-k all-gathers 8 bytes per kept entry (1 hop), fp16 all-reduces 2 bytes "
         "per entry (2 hops); equate the alpha-beta times on α = 15 µs, β = 1.1 GB/s",
    why="bytes are not the whole story: top-k's all-gather pays one α where the all-reduce pays two.",
    mistakes=((0.25, "that ties the bytes alone; top-k's all-gather pays one α where fp16's all-reduce pays "
                     "two, so it can send αβ more bytes: add αβ / (8Ψ) to the ratio."),))
_quiz("03",
    hint="section 3 printed each method's bytes per step: which method's bytes does each row send, and does one row send a little less than its method has to — what is missing, and what is it for?",
    why="suspect 2: variant C is int8 with an all-reduce of the codes but without the MAX all-reduce of the scales: each rank quantizes with its own per-chunk scales and decodes the sum with its own, so codes made at different scales are added as if they were one. Its bytes are the codes alone (212,992: one per value, padded to the 1,024-value chunks), without int8's 832 B of scales, and it lands farther from the reference than int8's rounding does in every column. Variant A is top-k with error feedback, sending exactly top-k's bytes: farther still in losses and gradient norms, by design.")

# ---------------------------------------------------------------- 04 · pipelines

add("04.gpipe-bubble", lambda: _bubble("gpipe", 8, 24), rel=0.02, hint="(p − 1) / (m + p − 1)",
    why="7 fill-and-drain slots out of 31: more micro-batches per stage shrink it.")
add("04.in-flight", lambda: _in_flight(6, 12, 1), rel=0.0,
    hint="GPipe runs every forward before any backward; 1F1B's rank r warms up with p − 1 − r forwards",
    why="GPipe holds every micro-batch on every rank; 1F1B's rank r never more than p − r (its "
        "warm-up forwards and the one it is working on).")
add("04.interleaved", lambda: _bubble("interleaved", 4, 8, 4), rel=0.02,
    hint="each fill step is 1/v of a stage: (p − 1) / (v·m + p − 1) — paid with v× more messages",
    why="3/35: the fill and drain are made of quarter-stage chunks.",
    mistakes=((lambda: _bubble("interleaved", 4, 8, 2), "that is v = 2; here each rank holds 4 chunks."),))
add("04.predict-1f1b", lambda: _bubble("1f1b", 4, 12), rel=0.05,
    hint="(p − 1) / (m + p − 1), p = 4, m = 12",
    why="with equal stages and free messages the emulated run lands on the closed form.")
_quiz("04",
    hint="summing the m micro-batch losses makes the logged loss and its gradient both m× the mean's (variant A's convention). For each suspect: which columns would move — the losses, the gradient norms, or both — and by how much? Compare the rows' gradient-norm Δs.",
    why="suspect 2: variant B backpropagates each micro-batch's loss without its 1/m while the loss it logs is still the mean: its gradients are m× too large from step 0 (gradient-norm Δ (m − 1)× the norm, the very Δ of the summed-loss row) yet its losses match the reference — its gradient is not the gradient of the loss it reports. A logging slip (suspect 1) would move only the losses; a gradient m× too small (suspect 3) would move its norm by (1 − 1/m)× the norm, not A's (m − 1)×; half the micro-batches (suspect 4) would send half the activations. AdamW divides each gradient by its own running scale, so A and B even apply the same updates (equal weight Δs); under SGD both would step m× too far — but A's logs say so, B's show the mean.")

