#!/usr/bin/env bash
# Device-call stages for the H200, session 11 (onnxruntime-gpu in /tmp/site from .chunk1-4, spconv in /tmp/spsite
# from .spconv1). Logs under $OUT/s11, returned as one tarball per stage.
# Usage: scripts/gpu_session11.sh chunk K | layers | e2e | tests
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s11; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  layers)  # carry .spconv1: the GEMM tiles tuned per row bucket, checked, then the layer sweep against spconv 2.x
    bash scripts/gpu_session6.sh spconv
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 300 python3 tests/plugins/sparse_triton_check.py cuda > $L/check.log 2>&1; echo "check rc=$?"
    grep -E "rows=|tunings|preloaded|TOTAL" $L/check.log
    TRITON_PRINT_AUTOTUNING=1 timeout 420 python3 benchmarks/bench_sparse.py --runs 3 --out $L/layers.md > $L/layers.log 2>&1
    echo "layers rc=$?"; grep -E "^\| " $L/layers.md | head -60
    tar czf $OUT/s11_layers.tgz -C $OUT s11
    ;;
  e2e)  # the LiDAR example against spconv eager, three runs
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 330 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/e2e.md > $L/e2e.log 2>&1
    echo "e2e rc=$?"; tail -14 $L/e2e.md
    tar czf $OUT/s11_e2e.tgz -C $OUT s11/e2e.md s11/e2e.log
    ;;
  tests)  # CUDA tests touching what changed (baked weights, deploy loads, graphs, ordering)
    timeout ${2:-250} python3 -m pytest -q -p no:cacheprovider tests/test_shared_frames.py tests/test_cuda_graphs.py \
      tests/test_cuda_ordering.py > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s11_tests.tgz -C $OUT s11/tests.log
    ;;
esac
