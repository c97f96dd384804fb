#!/usr/bin/env bash
# Device-call stages for the H200, session 13 (onnxruntime-gpu in /tmp/site from .chunk1-4, spconv in /tmp/spsite
# from .spconv1). Logs under $OUT/s13, returned as one tarball per stage.
# Usage: scripts/gpu_session13.sh chunk K | sparse [layers timeout] | layers [timeout] | rulebooks | e2e | probe | cg [budget] [configs] | tests [timeout]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s13; mkdir -p $L
spconv() {  # unpacked once per warm machine
  [ -d /tmp/spsite/spconv ] || bash scripts/gpu_session6.sh spconv
  export PYTHONPATH=/tmp/spsite:$PYTHONPATH
}
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  sparse)  # carry .spconv1: the one-sort strided rulebook checked on CUDA, profiled, then the layer sweep (3 runs)
    spconv
    timeout 150 python3 tests/plugins/sparse_triton_check.py cuda > $L/check.log 2>&1; echo "check rc=$?"
    grep -E "TOTAL|FAIL|ok=False" $L/check.log | tail -8; grep -c "ok=True" $L/check.log
    timeout 120 python3 benchmarks/profile_sparse.py --out $L/profile.md > $L/profile.log 2>&1; echo "profile rc=$?"
    grep -E "^\| (strided|SubM)" $L/profile.md | head -40
    timeout ${2:-330} python3 benchmarks/bench_sparse.py --runs 3 --out $L/layers.md > $L/layers.log 2>&1
    echo "layers rc=$?"; grep -E "^\| " $L/layers.md | head -20
    tar czf $OUT/s13_sparse.tgz -C $OUT s13
    ;;
  rulebooks)  # carry .spconv1: rulebook steps and one call against spconv 2.x, the latter also interleaved
    spconv
    timeout 200 python3 benchmarks/profile_sparse.py --out $L/profile2.md > $L/profile2.log 2>&1; echo "profile rc=$?"
    grep -E "^\| (strided|SubM) \| [0-9]+ \| [0-9.]+ \|" $L/profile2.md | grep -v "|.*|.*|.*| [a-z]" | head -8
    tar czf $OUT/s13_rulebooks.tgz -C $OUT s13/profile2.md s13/profile2.log
    ;;
  layers)  # carry .spconv1: CUDA check, then the layer sweep (3 runs)
    spconv
    timeout 240 python3 tests/plugins/sparse_triton_check.py cuda > $L/check2.log 2>&1; echo "check rc=$?"
    grep -E "TOTAL|FAIL|ok=False" $L/check2.log | tail -8; grep -c "ok=True" $L/check2.log
    timeout ${2:-330} python3 benchmarks/bench_sparse.py --runs 3 --out $L/layers2.md > $L/layers2.log 2>&1
    echo "layers rc=$?"; grep -E "^\| " $L/layers2.md | head -20
    tar czf $OUT/s13_layers.tgz -C $OUT s13
    ;;
  e2e)  # carry .spconv1: the LiDAR example against spconv eager, three runs
    spconv
    timeout 330 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/e2e.md \
      --e2e-modes spconv,eager,inductor,hybrid_trt,hybrid_trt/no-delegates > $L/e2e.log 2>&1
    echo "e2e rc=$?"; tail -16 $L/e2e.md; grep -E "placement" $L/e2e.log | head -5
    tar czf $OUT/s13_e2e.tgz -C $OUT s13/e2e.md s13/e2e.log
    ;;
  probe)  # the LiDAR example's placement verdict against its in-context cost (issue 10)
    timeout 240 python3 scripts/lidar_placement_probe.py > $L/probe.log 2>&1; echo "probe rc=$?"
    grep -E "PROBE|placement" $L/probe.log
    tar czf $OUT/s13_probe.tgz -C $OUT s13/probe.log
    ;;
  cg)  # CUDA-graph rows (issue 10), default fp16 batch 1; configs e.g. fp32:1,fp16:16
    timeout 300 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny \
      --configs ${3:-fp16:1} --variants inductor_ro,hybrid_cg_mp,ort_cg \
      --budget-s ${2:-200} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    tar czf $OUT/s13_cg.tgz -C $OUT s13/cg.md s13/cg.log
    ;;
  tests)  # CUDA tests of the sparse plugin and graphs
    timeout ${2:-250} python3 -m pytest -q -p no:cacheprovider tests/plugins tests/test_cuda_graphs.py \
      > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s13_tests.tgz -C $OUT s13/tests.log
    ;;
esac
