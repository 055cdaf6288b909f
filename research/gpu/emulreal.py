"""Real plain-loop steps on this GPU against emulated steps on several profiles (one real
measurement per configuration, each profile emulated on it). Usage: emulreal.py OUT.json [device]"""
import json, sys, time
from mgpukit.calibrate_gpu import measure_plain_steps
from mgpukit.costmodel.hardware import list_profiles
from mgpukit.measure.plainstep import emulate_plain_steps

device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
# the five reference rows, then configurations no profile was fitted on (held out by us)
CONFIGS = [("gpt-tiny", 8, "fp32", "sgd"), ("gpt-small", 8, "fp32", "sgd"), ("gpt-small", 8, "bf16", "adamw"),
           ("gpt2-124m", 8, "fp32", "sgd"), ("gpt2-124m", 8, "bf16", "adamw"),
           ("gpt-small", 32, "bf16", "adamw"), ("gpt2-124m", 4, "fp32", "adamw"), ("gpt2-124m", 16, "bf16", "sgd"),
           ("gpt-tiny", 32, "bf16", "adamw")]
if device == "cpu":
    CONFIGS = CONFIGS[:1]
profiles = [p for p in ("this-gpu", "h100-nvlink", "h200") if p in list_profiles()]
rows = []
print(f"{'config':<26}{'real ms':>9}{'peak GB':>9}  " + "  ".join(f"{p:>18}" for p in profiles), flush=True)
for model, b, dt, opt in CONFIGS:
    t0 = time.time()
    try:
        real = measure_plain_steps(model, batch=b, dtype=dt, optimizer=opt, device=device)
    except Exception as e:  # e.g. out of memory: say so, go on
        print(f"{model} b{b} {dt} {opt}: real run failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
        continue
    row = {"config": f"{model} b{b} {dt} {opt}", "real": real, "emulated": {}}
    cells = []
    for p in profiles:
        try:
            em = emulate_plain_steps(model, batch=b, dtype=dt, optimizer=opt, profile=p)
            row["emulated"][p] = em
            mr = em["peak_bytes"] / real["peak_bytes"] if real["peak_bytes"] else float("nan")
            cells.append(f"{em['step_s'] * 1e3:7.2f} {em['step_s'] * 1e3 / real['median_ms']:4.2f}x m{mr:4.2f}")
        except Exception as e:
            cells.append(f"{'err ' + type(e).__name__:>18}")
            row["emulated"][p] = {"error": f"{type(e).__name__}: {e}"}
    rows.append(row)
    pk = (real["peak_bytes"] or 0) / 1e9
    print(f"{row['config']:<26}{real['median_ms']:9.2f}{pk:9.2f}  " + "  ".join(cells) + f"   ({time.time() - t0:.0f} s)", flush=True)
    json.dump(rows, open(sys.argv[1], "w"), indent=1)
