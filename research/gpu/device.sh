#!/bin/bash
# One device call: calibrate this GPU, real vs emulated on several profiles, then shared/gpu's check.sh.
# .gpu = a copy of the shared/gpu folder (check.sh, realstep.py), .whl = a plotly wheel (the device has no plotly).
set -u
OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"; T0=$SECONDS; stamp() { echo "== [$((SECONDS-T0)) s] $*"; }
if [ -d .whl ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl; fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 -c "import torch, accelerate, plotly; print(torch.__version__, accelerate.__version__, plotly.__version__, torch.cuda.get_device_name())"
stamp "A. mgpukit calibrate (this GPU)"
timeout 180 python3 -c "import sys; from mgpukit.cli import main; sys.exit(main())" calibrate --debug 2>&1 | tail -25
cp ~/.cache/mgpukit/hardware/this-gpu.* "$OUT/" 2>/dev/null
stamp "B. real vs emulated, profiles this-gpu / h100-nvlink / h200"
timeout 200 python3 research/gpu/emulreal.py "$OUT/real_vs_emulated.json" 2>&1 | grep -v Warning
stamp "C. shared/gpu/check.sh"
GPUDIR=.gpu OUT="$OUT/check" timeout 420 bash .gpu/check.sh > /dev/null 2>&1; echo "check.sh rc=$?"
cat "$OUT/check/log.txt" | grep -v -E "Warning|warn\(" | cut -c1-300
stamp done
