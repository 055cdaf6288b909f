"""Llama-3-scale GEMMs and attention on one GPU (the planner's unmeasured shapes), as measured on an
H100 on 2026-11-26 (`data/reference/h100-2026-11-26.json`). This script touches CUDA, so the kit's own
launches (bench gpu's real_scale, bench overhead) must run in another process: the kit refuses to fork
workers after CUDA was initialised. Usage: llama_kernels.py OUT.json [cpu]"""
import json, sys, time, traceback
import torch
import torch.nn.functional as F
from mgpukit.calibrate_gpu import _Timer

cpu = len(sys.argv) > 2
dev = torch.device("cpu" if cpu else "cuda")
timer = _Timer(dev)
out = {"device": "cpu" if cpu else torch.cuda.get_device_name()}
T0 = time.time()
def save():
    json.dump(out, open(sys.argv[1], "w"), indent=1)
def stamp(s):
    print(f"== [{time.time() - T0:4.0f} s] {s}", flush=True)

# 1. Llama 3 405B and 70B layers at tp 8, one micro-batch of 8192 tokens, bf16: forward, dgrad, wgrad
m = 256 if cpu else 8192
layers = {"405b": dict(h=16384, qkv=(128 + 16) * 128 // 8, o=128 * 128 // 8, fc1=2 * 53248 // 8, fc2=53248 // 8),
          "70b": dict(h=8192, qkv=(64 + 16) * 128 // 8, o=64 * 128 // 8, fc1=2 * 28672 // 8, fc2=28672 // 8)}
if cpu:
    layers = {"405b": dict(h=256, qkv=64, o=64, fc1=128, fc2=64)}
stamp("1. Llama-scale GEMMs (bf16, tp 8, 8192 tokens)")
rows = []
try:
    for name, L in layers.items():
        shapes = {"qkv": (L["h"], L["qkv"]), "o": (L["o"], L["h"]), "fc1": (L["h"], L["fc1"]), "fc2": (L["fc2"], L["h"])}
        for lin, (k, n) in shapes.items():
            for kind, (M, N, K) in {"fwd": (m, n, k), "dgrad": (m, k, n), "wgrad": (k, n, m)}.items():
                a = torch.randn(M, K, device=dev, dtype=torch.bfloat16); b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
                s = timer.time(lambda: a @ b, 3 if cpu else 20)
                rows.append({"model": name, "linear": lin, "pass": kind, "m": M, "n": N, "k": K, "s": s,
                             "tflops": 2 * M * N * K / s / 1e12})
                print(f"  {name} {lin:<4} {kind:<6} {M}x{N}x{K}: {s * 1e3:7.3f} ms {rows[-1]['tflops']:6.1f} TFLOP/s", flush=True)
    # sustained: the 405B fc1 forward back to back for ~3 s, against its 20-launch figure
    a = torch.randn(m, layers["405b"]["h"], device=dev, dtype=torch.bfloat16)
    b = torch.randn(layers["405b"]["h"], layers["405b"]["fc1"], device=dev, dtype=torch.bfloat16)
    s = timer.time(lambda: a @ b, 5 if cpu else 600)
    out["sustained_fc1_405b"] = {"launches": 5 if cpu else 600, "s": s, "tflops": 2 * m * a.shape[1] * b.shape[1] / s / 1e12}
    print(f"  sustained 405B fc1 x600: {s * 1e3:.3f} ms {out['sustained_fc1_405b']['tflops']:.1f} TFLOP/s", flush=True)
except Exception:
    traceback.print_exc()
out["gemm"] = rows; save()

stamp("2. causal attention, head dim 128, seq 8192 (flash/cuDNN as torch picks), bf16")
att = []
try:
    for name, heads, seq, d, b in (("405b tp8", 16, 8192, 128, 1), ("70b tp8", 8, 8192, 128, 1),
                                   ("8b tp1", 32, 8192, 128, 1), ("hd128 s2048", 16, 2048, 128, 4),
                                   ("hd64 s1024", 12, 1024, 64, 8)):
        if cpu:
            heads, seq, d = 2, 64, 16
        q, k, v = (torch.randn(b, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.randn(b, heads, seq, d, device=dev, dtype=torch.bfloat16)
        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
        def both():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        f = timer.time(fwd, 3 if cpu else 20); fb = timer.time(both, 3 if cpu else 20)
        flops = 4 * b * heads * seq * seq * d / 2  # causal: half the square, fwd 2 GEMMs
        att.append({"name": name, "b": b, "heads": heads, "seq": seq, "d": d, "fwd_s": f, "bwd_s": fb - f,
                    "fwd_tflops": flops / f / 1e12, "bwd_tflops": 2.5 * flops / max(fb - f, 1e-9) / 1e12})
        print(f"  {name:<12} fwd {f * 1e3:7.3f} ms ({att[-1]['fwd_tflops']:5.0f} TFLOP/s causal)  bwd {(fb - f) * 1e3:7.3f} ms "
              f"({att[-1]['bwd_tflops']:5.0f})", flush=True)
except Exception:
    traceback.print_exc()
out["attention"] = att; save()

stamp("done")
