#!/usr/bin/env bash
# Create .venv with a CPU build of torch (unless torch is already importable from the chosen python) and
# hybrid_trt installed editable with its CPU and test extras. Works offline from the package registries alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv" >&2
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "[setup] installing a CPU build of torch" >&2
  # torch==2.13.0 resolves to the CPU wheel kept on this project's machines; elsewhere, PyTorch's CPU index.
  .venv/bin/pip install -q "torch==2.13.0" 2>/dev/null \
    || .venv/bin/pip install -q "torch>=2.11,<2.15" --index-url https://download.pytorch.org/whl/cpu
fi
echo "[setup] installing hybrid_trt[onnx,test]" >&2
.venv/bin/pip install -q -e ".[onnx,test]"
