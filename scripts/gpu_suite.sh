#!/usr/bin/env bash
# Run on the GPU machine through the device tool:  bash scripts/gpu_suite.sh [gpu_suite.py args]
# It needs nothing installed beyond the machine's image (torch, cuda-bindings, typer, rich).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export CUDA_AGENT_HOME=/tmp/cuda-agent CUDA_AGENT_CACHE=/tmp/cuda-agent/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,temperature.gpu --format=csv
python3 -m benchmarks.gpu_suite "$@" 2>&1
