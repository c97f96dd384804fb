#!/usr/bin/env bash
# Device-call stages for the H200, session 14 (spconv in /tmp/spsite from .spconv1). Logs under $OUT/s14.
# Usage: scripts/gpu_session14.sh rulebooks | layers [timeout] | tests [timeout]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s14; mkdir -p $L
spconv() {  # unpacked once per warm machine
  [ -d /tmp/spsite/spconv ] || bash scripts/gpu_session6.sh spconv
  export PYTHONPATH=/tmp/spsite:$PYTHONPATH
}
case ${1:?stage} in
  rulebooks)  # carry .spconv1: direct launches checked on CUDA, then the rulebooks against spconv 2.x
    spconv
    python3 tests/plugins/triton_launch_check.py cuda > $L/launch_check.log 2>&1; echo "launch check rc=$?"
    tail -5 $L/launch_check.log
    timeout 240 python3 tests/plugins/sparse_triton_check.py cuda > $L/check.log 2>&1; echo "check rc=$?"
    grep -E "TOTAL|FAIL|ok=False" $L/check.log | tail -8; grep -c "ok=True" $L/check.log
    timeout 200 python3 benchmarks/profile_sparse.py --out $L/profile.md > $L/profile.log 2>&1; echo "profile rc=$?"
    grep -E "\*\*total\*\*|^\| (strided|SubM) \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9]+ \|" $L/profile.md
    ;;
  layers)  # carry .spconv1: the layer sweep (3 runs)
    spconv
    timeout ${2:-330} python3 benchmarks/bench_sparse.py --runs 3 --out $L/layers.md > $L/layers.log 2>&1
    echo "layers rc=$?"; grep -E "^\| " $L/layers.md | head -20
    ;;
  tests)  # CUDA tests of the sparse plugin and graphs
    timeout ${2:-250} python3 -m pytest -q -p no:cacheprovider tests/plugins tests/test_cuda_graphs.py \
      > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    ;;
esac
