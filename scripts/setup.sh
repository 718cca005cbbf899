#!/usr/bin/env bash
# Create .venv and install cuda-agent with its test dependencies, the peer tuners it is
# benchmarked against (Optuna, Kernel Tuner) and Ray (`train --ray`, whose tests run in CI: about
# 20 s and 250 MB more, against torch's 1.5 GB).
# torch goes first and pinned: a bare `torch` requirement on an empty environment pulls a
# multi-gigabyte CUDA build; 2.13.0 is the CPU wheel CI machines carry on disk. Where a GPU
# build of torch is wanted, install it into .venv before running this script.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[test,tuners,analysis,cluster]"
