#!/usr/bin/env bash
# Device-call stages for the H200, session 15 (onnxruntime-gpu in /tmp/site from .chunk1-4, spconv in /tmp/spsite
# from .spconv1). Logs under $OUT/s15.
# Usage: scripts/gpu_session15.sh chunk K | sparse | conf [budget_min] | cg [budget_s] [configs]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s15; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  sparse)  # carry .spconv1: the direct launcher after review on CUDA, then the LiDAR example end to end (issue 10)
    [ -d /tmp/spsite/spconv ] || bash scripts/gpu_session6.sh spconv
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 120 python3 tests/plugins/triton_launch_check.py cuda > $L/launch_check.log 2>&1; echo "launch check rc=$?"
    tail -6 $L/launch_check.log
    timeout 90 python3 scripts/rulebook_cuda_quick.py > $L/rulebook_quick.log 2>&1; echo "rulebook quick rc=$?"
    tail -4 $L/rulebook_quick.log
    timeout 300 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/e2e.md \
      --e2e-modes spconv,inductor,hybrid_trt > $L/e2e.log 2>&1
    echo "e2e rc=$?"; tail -14 $L/e2e.md; grep -E "placement" $L/e2e.log | head -5
    ;;
  conf)  # issue 7: the 14 models of session 14's sweep, never run on a GPU, fp16 and fp32, four lanes; CUDA tests
         # in a fifth lane beside them
    (timeout 480 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_graphs.py tests/test_cuda_ordering.py \
       tests/plugins/test_triton_launch.py tests/plugins/test_plugin_registry.py > $L/tests.log 2>&1
     echo "tests rc=$?" >> $L/tests.log) &
    source scripts/conf_lanes.sh
    conf_lanes $L "${2:-6}" "H200; four conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "timm_coatnet_nano_rw_224,timm_crossvit_tiny_240,timm_davit_tiny,timm_efficientnetv2_rw_t,timm_efficientvit_l1,timm_eva02_tiny_patch14_224,timm_focalnet_tiny_srf" \
      "timm_gcvit_xxtiny,timm_mambaout_femto,timm_mobilenetv4_hybrid_medium,timm_mobilevitv2_050,timm_starnet_s1,timm_volo_d1_224,timm_xcit_nano_12_p16_224"
    tar xzf $L.tgz -O s15/tests.log | grep -E "^(FAILED|ERROR)|passed|failed|rc=" | tail -15  # (conf_lanes waited)
    ;;
  cg)  # issue 10: CUDA-graph rows at the reduce-overhead defaults (measured placement) not yet run that way
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,detector \
      --configs ${3:-fp16:16,fp32:1} --variants inductor_ro,hybrid_cg_mp,ort_cg \
      --budget-s ${2:-480} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    ;;
esac
