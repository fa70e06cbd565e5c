#!/usr/bin/env bash
# GPU smoke run (bench/gpu/smoke.py): a short `trainer=local` run on one CUDA GPU, with a CUDA vLLM
# when it has one or can install it, else the in-process sampler; prints one summary line.
#   bash bench/gpu/run.sh [--dry-run] [--path auto|vllm|hf] [--model tiny|hub|DIR] [OVERRIDES...]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$HERE/smoke.py" "$@"
