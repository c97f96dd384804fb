#!/usr/bin/env bash
# GPU verification stages, run on the H200 through the device tool with onnxruntime-gpu unpacked to /tmp/site.
# Usage: scripts/gpu_checks.sh tests|conformance|bench   (logs under $OUT)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
PY=${PY:-python3}
stage=${1:-tests}
$PY -c "import torch, onnxruntime as o; print(torch.__version__, torch.cuda.get_device_name(), o.__version__, o.get_available_providers())"
case $stage in
  tests)
    timeout 560 $PY -m pytest -q -rs -p no:cacheprovider --timeout=300 \
      tests/test_cuda_ordering.py tests/test_cuda_graphs.py tests/test_attention.py tests/test_engine_key.py \
      "tests/test_lowerings.py" -k "cuda or float16 or attention or gpu" 2>&1 | tee $OUT/tests.log | tail -60
    ;;
  noise)
    timeout 200 $PY scripts/ort_noise_check.py 2>$OUT/noise_stderr.log | tee $OUT/noise.log
    echo "--- stderr lines from onnxruntime:"; grep -c "onnxruntime" $OUT/noise_stderr.log; grep "onnxruntime" $OUT/noise_stderr.log | head
    ;;
  conformance)
    timeout 280 $PY benchmarks/conformance.py --device cuda --dtype float16 --timeout 120 --latency-s 1 --budget-min 3.5 \
      --note "H200, onnxruntime-gpu 1.31.1" --out $OUT/conformance_h200_fp16.md 2>&1 | tail -40
    timeout 280 $PY benchmarks/conformance.py --device cuda --dtype float32 --timeout 120 --latency-s 1 --budget-min 3.5 \
      --note "H200, onnxruntime-gpu 1.31.1" --out $OUT/conformance_h200_fp32.md 2>&1 | tail -40
    ;;
  bench)
    timeout 560 $PY benchmarks/bench_cudagraphs.py --budget-s 420 --grace-s 60 --out $OUT/cudagraphs_h200.md 2>&1 | tail -60
    ;;
esac
