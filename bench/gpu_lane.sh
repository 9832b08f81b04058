#!/usr/bin/env bash
# The GPU lane, as one script for a lent GPU machine (bare: the image's python3 holds torch,
# nothing can be fetched). Run from the repository root:
#
#     bash bench/gpu_lane.sh [OUT_DIR]
#
# Wheels the image lacks (pydantic and its own needs, for the trainer's dataset versions and
# the instance catalog) come in .whl/ beside the checkout, downloaded for CPython 3.12 with
# `pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl pydantic==<pin>
# pydantic-core==<its pin> annotated-types typing-inspection typing-extensions`.
#
# What it runs, each step on its own so one failure does not hide the others' figures:
#   1. the machine: GPU, driver, torch, whether TensorRT is importable;
#   2. bench/train.py --device cuda (its checks first, then the 124M and 1.3B runs);
#   3. if step 2 failed, the 124M run alone, so a throughput figure still comes back.
set -uo pipefail
out=${1:-${OUT:-/tmp/gpu-lane}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu lane: the carried wheels did not install"; exit 2; }
  export PYTHONPATH=/tmp/site
fi

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 - <<'EOF'
import importlib.util, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
print("tensorrt importable:", importlib.util.find_spec("tensorrt") is not None,
      "| tritonserver on PATH:", __import__("shutil").which("tritonserver") is not None)
EOF
} 2>&1 | tee "$out/machine.txt"

rc=0
timeout 480 python3 bench/train.py --device cuda --output "$out/train-cuda.json" 2>&1 | tee "$out/train.log" || rc=$?
echo "bench/train.py --device cuda exited $rc"
if [ "$rc" != 0 ]; then
  tmp=$(mktemp -d)
  python3 -c "import sys; sys.path.insert(0, '.'); from workloads.train.data import generate_synthetic_shards as g; g('$tmp/shards', num_shards=2, tokens_per_shard=250000, vocab_size=50304, seed=0)"
  timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node=1 -m workloads.train \
    --data "$tmp/shards" --model gpt2-124m --micro-batch 16 --precision bf16 --device cuda --gpu-model h100 \
    --max-steps 40 --log-every 1 --metrics "$out/fallback-124m.jsonl" 2>&1 | tail -40 | tee "$out/fallback.log"
  echo "fallback 124M (eager) exited ${PIPESTATUS[0]}"
fi
exit "$rc"
