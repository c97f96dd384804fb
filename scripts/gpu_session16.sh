#!/usr/bin/env bash
# Device-call stages for the H200, session 16 (onnxruntime-gpu in /tmp/site from .chunk1-4, spconv in /tmp/spsite
# from .spconv1). Logs under $OUT/s16, archived per stage (the device returns only so many files per call).
# Usage: scripts/gpu_session16.sh chunk K | lidar | cg [budget_s] | conf [budget_min]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s16; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK (the fourth with .spconv1); the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    [ -d .spconv1 ] && { [ -d /tmp/spsite/spconv ] || bash scripts/gpu_session6.sh spconv; }
    ;;
  lidar)  # issue 10: the LiDAR example end to end after the host-synchronisation charge in placement (3523389)
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 420 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/e2e.md \
      --e2e-modes spconv,inductor,hybrid_trt > $L/e2e.log 2>&1
    echo "e2e rc=$?"; tail -14 $L/e2e.md; grep -E "placement|partition" $L/e2e.log | head -8
    ;;
  cg)  # issue 10: fp32 batch-1 CUDA-graph rows not run in session 15, and the guard recipe on the launch-bound ones
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models mobilenet_v3_large,resnet50,efficientnet_b0,convnext_tiny,detector --configs fp32:1 \
      --variants inductor_ro,inductor_ro_recipe,hybrid_cg_mp,hybrid_cg_mp_recipe,ort_cg \
      --budget-s ${2:-520} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    ;;
  cg2)  # issue 10: after placement times Inductor's side by its captured replay and gives near ties to Inductor
         # under graphs; the CUDA placement tests first
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py > $L/tests2.log 2>&1
    echo "placement tests rc=$?"; tail -3 $L/tests2.log
    timeout 420 python3 benchmarks/bench_cudagraphs.py --no-lidar --models ${3:-mobilenet_v3_large,resnet50,efficientnet_b0,detector,resnet18,convnext_tiny} \
      --configs ${4:-fp32:1,fp16:16} --variants inductor_ro,hybrid_cg_mp,ort_cg \
      --budget-s ${2:-380} --grace-s 30 --out $L/cg2.md > $L/cg2.log 2>&1
    echo "cg rc=$?"; cat $L/cg2.md
    ;;
  conf)  # issue 7: EVA02-T fp16 again (its verdict recorded), the partly delegated rows after the charge, and the
         # view/stride fixes of session 15 on the GPU; the CUDA tests of placement, ordering and graphs beside them
    (timeout 560 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py tests/test_cuda_ordering.py \
       tests/test_cuda_graphs.py > $L/tests.log 2>&1; echo "tests rc=$?" >> $L/tests.log) &
    source scripts/conf_lanes.sh
    conf_lanes $L "${2:-6}" "H200; four conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "timm_eva02_tiny_patch14_224,tv_fcos_resnet50_fpn,tv_maskrcnn_resnet50_fpn,tv_swin_t,timm_tresnet_m" \
      "tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_keypointrcnn_resnet50_fpn,timm_volo_d1_224,tv_raft_small,timm_maxvit_rmlp_pico_rw_256"
    tar xzf $L.tgz -O s16/tests.log | grep -E "^(FAILED|ERROR)|passed|failed|rc=" | tail -15
    ;;
esac
