#!/usr/bin/env bash
# Create .venv with torch and torchvision (unless both are already importable from .venv) and hybrid_trt installed
# editable with its ONNX Runtime and test extras (the test extra brings torchvision and timm for the conformance
# suite). Works offline from the package registries alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv" >&2
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, torchvision" 2>/dev/null; then
  # torch and torchvision must be a matching pair: the registry's torchvision does not import beside a torch of
  # another release (e.g. a CPU-only 2.13 wheel), so both are installed together. The registry's torch 2.14.1
  # carries CUDA libraries and runs on CPU-only machines too; elsewhere fall back to PyTorch's CPU index.
  echo "[setup] installing torch 2.14.1 and torchvision 0.29.1" >&2
  .venv/bin/pip install -q "torch==2.14.1" "torchvision==0.29.1" \
    || .venv/bin/pip install -q "torch==2.14.1" "torchvision==0.29.1" --index-url https://download.pytorch.org/whl/cpu
fi
echo "[setup] installing hybrid_trt[onnx,test]" >&2
.venv/bin/pip install -q -e ".[onnx,test]"
