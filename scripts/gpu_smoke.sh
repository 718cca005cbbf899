#!/usr/bin/env bash
# First contact with a GPU machine: probe the launch path, then tune a few small problems.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUDA_AGENT_HOME=/tmp/cuda-agent
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/work"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
python3 -c "import torch, cuda.bindings; print(torch.__version__, cuda.bindings.__version__)"
python3 scripts/probe_launch.py 2>&1 | tail -20
python3 -m cuda_agent.cli doctor
for p in tests/data/good/softmax_small.py tests/data/good/relu_small.py tests/data/good/sum_small.py; do
  timeout 300 python3 -m cuda_agent.cli tune "$p" --device cuda --budget 24 --out "$OUT/work/$(basename $p .py)" 2>&1 | tail -25
done
timeout 300 python3 -m cuda_agent.cli tune benchmarks/problems/softmax_short_rows.py --device cuda --budget 40 --out "$OUT/work/softmax_short_rows" 2>&1 | tail -25
tar czf "$OUT/smoke.tgz" -C "$OUT/work" . && ls -la "$OUT"
