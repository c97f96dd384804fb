#!/usr/bin/env bash
# Device-call stages for the H200, session 12 (onnxruntime-gpu in /tmp/site from .chunk1-4, spconv in /tmp/spsite
# from .spconv1). Logs under $OUT/s12, returned as one tarball per stage.
# Usage: scripts/gpu_session12.sh chunk K | profile | layers [timeout] | e2e | e2eprof | tests [timeout]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s12; mkdir -p $L
spconv() {  # unpacked once per warm machine
  [ -d /tmp/spsite/spconv ] || bash scripts/gpu_session6.sh spconv
  export PYTHONPATH=/tmp/spsite:$PYTHONPATH
}
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  profile)  # carry .spconv1: the pushed strided map checked on CUDA, then its steps profiled
    spconv
    timeout 200 python3 tests/plugins/sparse_triton_check.py cuda > $L/check.log 2>&1; echo "check rc=$?"
    grep -E "TOTAL|FAIL|ok=False" $L/check.log | tail -8; grep -c "ok=True" $L/check.log
    timeout 150 python3 benchmarks/profile_sparse.py --out $L/profile.md > $L/profile.log 2>&1; echo "profile rc=$?"
    grep -E "^\| (strided|SubM)" $L/profile.md | head -40
    tar czf $OUT/s12_profile.tgz -C $OUT s12
    ;;
  layers)  # carry .spconv1: the layer sweep against spconv 2.x, three runs
    spconv
    timeout ${2:-540} python3 benchmarks/bench_sparse.py --runs 3 --out $L/layers.md > $L/layers.log 2>&1
    echo "layers rc=$?"; grep -E "^\| " $L/layers.md | head -20
    tar czf $OUT/s12_layers.tgz -C $OUT s12
    ;;
  e2e)  # carry .spconv1: the LiDAR example against spconv eager, three runs
    spconv
    timeout 330 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/e2e.md \
      --e2e-modes spconv,eager,inductor,hybrid_trt,hybrid_trt/no-delegates > $L/e2e.log 2>&1
    echo "e2e rc=$?"; tail -16 $L/e2e.md; grep -E "placement" $L/e2e.log | head -5
    tar czf $OUT/s12_e2e.tgz -C $OUT s12/e2e.md s12/e2e.log
    ;;
  e2eprof)  # profiles of the LiDAR example, eager / Inductor / hybrid_trt (the #10 gap to Inductor)
    timeout 200 python3 benchmarks/profile_sparse.py --e2e > $L/e2e_profile.log 2>&1; echo "e2e profile rc=$?"
    grep -E "=====" $L/e2e_profile.log
    tar czf $OUT/s12_e2eprof.tgz -C $OUT s12/e2e_profile.log
    ;;
  probe)  # the LiDAR example's placement verdict against its in-context cost (issue 10)
    timeout 240 python3 scripts/lidar_placement_probe.py > $L/probe.log 2>&1; echo "probe rc=$?"
    grep -E "PROBE|placement" $L/probe.log
    tar czf $OUT/s12_probe.tgz -C $OUT s12/probe.log
    ;;
  cg)  # fp16 batch 1 under CUDA graphs after the TF32 fix (fp16 engines keep ONNX Runtime's tensor-core math)
    timeout 300 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny \
      --configs fp16:1 --variants inductor_ro,hybrid_cg_mp,ort_cg \
      --budget-s ${2:-200} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    tar czf $OUT/s12_cg.tgz -C $OUT s12/cg.md s12/cg.log
    ;;
  tests)  # CUDA tests of the sparse plugin and graphs
    timeout ${2:-250} python3 -m pytest -q -p no:cacheprovider tests/plugins tests/test_cuda_graphs.py \
      > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s12_tests.tgz -C $OUT s12/tests.log
    ;;
esac
