"""The H100's measured Llama-scale kernels (data/reference/h100-2026-11-26.json) against the
planner's kernel model, and the fit of the shape terms of the ``[attention]`` table on them.

    .venv/bin/python research/gpu/fit_h100_kernels.py [profile ...]   # default h100-ib

1. Every bf16 GEMM timed (`gemm`: GPT shapes, 10 launches; `gemm_llama_tp8`: Llama 3 405B/70B
   linears at tp 8, 20 launches), measured vs `kernels.gemm_seconds` as the emulator charges it
   (burst) and as the planner does (`at_sustained_power`).
2. Every bf16 causal SDPA timed (`attention`, `attention_long`), measured vs
   `kernels.attention_seconds`.
3. ``--fit``: the attention shape terms (`AttentionModel`: forward and backward rate (at most 1),
   head_dim_half (shared by both directions), block_overhead and tail (each direction its own))
   by least squares on the log of the times, a grid then a coordinate refinement (no scipy
   here); with the Llama 3 70B row (8 heads) held out and predicted, then on all rows.
"""
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from mgpukit.costmodel.hardware import load_profile
from mgpukit.costmodel.kernels import at_sustained_power, attention_flops, attention_seconds, gemm_seconds

REF = json.loads((Path(__file__).resolve().parents[2] / "data/reference/h100-2026-11-26.json").read_text())
GEMMS = ([dict(r, name=f"gpt {r['m']}x{r['n']}x{r['k']}") for r in REF["gemm"] if r["dtype"] == "bfloat16"]
         + [dict(r, name=f"{r['model']} {r['linear']} {r['pass']}") for r in REF["gemm_llama_tp8"]])
ATT = ([dict(name=f"b{r['b']} h{r['h']} s{r['s']} d{r['d']}", bh=r["b"] * r["h"], s=r["s"], d=r["d"],
             fwd=r["fwd_s"], bwd=r["bwd_s"]) for r in REF["attention"] if r["dtype"] == "bfloat16"]
       + [dict(name=r["name"], bh=r["b"] * r["heads"], s=r["seq"], d=r["d"], fwd=r["fwd_s"], bwd=r["bwd_s"])
          for r in REF["attention_long"]])


def gemm_table(p):
    sus = at_sustained_power(p)
    print(f"{'GEMM (bf16)':<22}{'m x n x k':>19}{'measured':>10}{'burst':>8}{'ratio':>7}{'sustained':>10}{'ratio':>7}  TFLOP/s meas / sust")
    tot = [0.0, 0.0, 0.0]
    for r in GEMMS:
        b = gemm_seconds(r["m"], r["n"], r["k"], p, dtype="bf16")
        c = gemm_seconds(r["m"], r["n"], r["k"], sus, dtype="bf16")
        f = 2 * r["m"] * r["n"] * r["k"]
        if not r["name"].startswith("gpt"):
            tot = [tot[0] + r["s"], tot[1] + b, tot[2] + c]
        print(f"{r['name']:<22}{'%dx%dx%d' % (r['m'], r['n'], r['k']):>19}{r['s'] * 1e3:9.3f}m{b * 1e3:7.3f}m{b / r['s']:7.2f}"
              f"{c * 1e3:9.3f}m{c / r['s']:7.2f}  {f / r['s'] / 1e12:4.0f} / {f / c / 1e12:4.0f}")
    s = REF["gemm_sustained"]
    print(f"Llama tp8 GEMMs, sum: measured {tot[0] * 1e3:.2f} ms (20 launches each), burst model {tot[1] * 1e3:.2f} "
          f"({tot[1] / tot[0]:.3f}), sustained {tot[2] * 1e3:.2f} ({tot[2] / tot[0]:.3f}); 405B fc1 x{s['launches']} back to "
          f"back: {s['tflops']:.0f} TFLOP/s measured, sustained model "
          f"{2 * 8192 * 13312 * 16384 / gemm_seconds(8192, 13312, 16384, sus, dtype='bf16') / 1e12:.0f}")


def att_table(p, rows=ATT):
    print(f"{'attention (bf16, causal)':<26}{'fwd meas':>9}{'model':>8}{'ratio':>7}{'bwd meas':>10}{'model':>8}{'ratio':>7}  TFLOP/s fwd, bwd meas / model")
    for r in rows:
        f = attention_seconds(r["bh"], r["s"], r["s"], r["d"], p, dtype="bf16", causal=True)
        b = attention_seconds(r["bh"], r["s"], r["s"], r["d"], p, dtype="bf16", causal=True, backward=True)
        ff = attention_flops(r["bh"], r["s"], r["s"], r["d"], causal=True)
        print(f"{r['name'] + ' bh%d' % r['bh']:<26}{r['fwd'] * 1e3:8.3f}m{f * 1e3:7.3f}m{f / r['fwd']:7.2f}{r['bwd'] * 1e3:9.3f}m"
              f"{b * 1e3:7.3f}m{b / r['bwd']:7.2f}  {ff / r['fwd'] / 1e12:4.0f} {2.5 * ff / r['bwd'] / 1e12:4.0f} / "
              f"{ff / f / 1e12:4.0f} {2.5 * ff / b / 1e12:4.0f}")


KEYS = ("forward", "backward", "head_dim_half", "block_overhead", "block_overhead_backward", "tail", "tail_backward")


def _loss(p, x, rows):
    a = replace(p.attention, **dict(zip(KEYS, x)))
    q = replace(p, attention=a)
    err = []
    for r in rows:
        for bwd in (False, True):
            t = attention_seconds(r["bh"], r["s"], r["s"], r["d"], q, dtype="bf16", causal=True, backward=bwd)
            err.append(math.log(t / r["bwd" if bwd else "fwd"]))
    return sum(e * e for e in err), err


def fit(p, rows):
    grid = [[0.6, 0.8, 1.0], [0.6, 0.8, 1.0], [0, 32, 64, 128], [0, 1, 2, 4, 8], [0, 1, 2, 4, 8],
            [0, 0.25, 0.5, 1], [0, 0.25, 0.5, 1]]
    x = list(min(itertools.product(*grid), key=lambda x: _loss(p, x, rows)[0]))
    step = [0.05, 0.05, 8, 0.5, 0.5, 0.1, 0.1]
    for _ in range(14):  # coordinate refinement, halving the steps
        for i in range(len(KEYS)):
            for sgn in (-1, 1):
                y = list(x); y[i] = max(0.0, y[i] + sgn * step[i])
                if y[0] <= 1 and y[1] <= 1 and _loss(p, y, rows)[0] < _loss(p, x, rows)[0]:
                    x = y
        step = [s / 2 for s in step]
    return x


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    for name in args or ["h100-ib"]:
        prof = load_profile(name)
        print(f"== profile {name}")
        gemm_table(prof)
        att_table(prof)
        if "--fit" in sys.argv:
            held = [r for r in ATT if r["name"] != "70b tp8"]
            x = fit(prof, held)
            print("fit without 70b tp8: " + ", ".join(f"{k} {v:.3f}" for k, v in zip(KEYS, x)))
            _, err = _loss(prof, x, [r for r in ATT if r["name"] == "70b tp8"])
            print("  held-out 70b tp8: model/measured fwd %.3f bwd %.3f" % tuple(math.exp(e) for e in err))
            x = fit(prof, ATT)
            ss, err = _loss(prof, x, ATT)
            print(f"fit on all {len(ATT)} rows: " + ", ".join(f"{k} {v:.3f}" for k, v in zip(KEYS, x))
                  + "; rms %.1f %%, worst %+.1f %%" % (100 * math.sqrt(ss / len(err)), 100 * math.expm1(max(err, key=abs))))
            print("  per row, model/measured (fwd, bwd): " + ", ".join(
                f"{r['name']} {math.exp(err[2 * i]):.2f} {math.exp(err[2 * i + 1]):.2f}" for i, r in enumerate(ATT)))
