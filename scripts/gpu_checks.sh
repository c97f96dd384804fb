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
  session2)
    # conformance fp16 and fp32 side by side (latency ratios are within one process; the two share the GPU),
    # while a third lane runs the CUDA-graph probe and tests, the float16 lowerings and the warm-start check.
    (timeout 470 $PY benchmarks/conformance.py --device cuda --dtype float16 --timeout 120 --latency-s 1 --budget-min 6.3 \
      --note "H200; the fp16 and fp32 runs ran side by side on the one GPU" --out $OUT/conformance_h200_fp16.md > $OUT/conf16.log 2>&1) &
    (timeout 470 $PY benchmarks/conformance.py --device cuda --dtype float32 --timeout 120 --latency-s 1 --budget-min 6.3 \
      --note "H200; the fp16 and fp32 runs ran side by side on the one GPU" --out $OUT/conformance_h200_fp32.md > $OUT/conf32.log 2>&1) &
    ( OUT=/tmp/probe timeout 200 $PY scripts/cudagraph_teardown_probe.py --timeout 150
      timeout 230 $PY -m pytest -v -p xdist -n 2 -p no:cacheprovider tests/test_cuda_graphs.py
      timeout 60 $PY -m pytest -q -p no:cacheprovider tests/test_lowerings.py -k "float16 and (zero_size or view)"
      timeout 60 $PY scripts/gpu_warm_start_check.py cold; timeout 60 $PY scripts/gpu_warm_start_check.py warm
    ) > $OUT/lane3.log 2>&1 &
    wait
    grep -E "SUMMARY|passed|failed|crashed|cold:|warm:|loaded|built" $OUT/lane3.log | head -40
    grep -E "summary" $OUT/conformance_h200_fp16.md $OUT/conformance_h200_fp32.md
    ;;
  bench)
    timeout 560 $PY benchmarks/bench_cudagraphs.py --budget-s 420 --grace-s 60 --out $OUT/cudagraphs_h200.md 2>&1 | tail -60
    ;;
esac
