#!/usr/bin/env bash
# Device-call stages for the H200, session 9 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s9,
# returned as one tarball per stage.
# Usage: scripts/gpu_session9.sh chunk K | det [budget_min] | cg [budget_s] | tests [timeout]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s9; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  det)  # the detectors (and sequencer2d_s) after the indexing/scatter/copy/empty lowerings, which delegate more
        # of them on the CPU; never run on the H200 since (default options, four lanes, two per dtype)
    source scripts/conf_lanes.sh
    conf_lanes $L "${2:-7}" "H200; four conformance lanes side by side (two per dtype, GPU and 16 cores shared)" \
      "tv_fasterrcnn_resnet50_fpn,tv_maskrcnn_resnet50_fpn,tv_keypointrcnn_resnet50_fpn,tv_ssd300_vgg16" \
      "tv_retinanet_resnet50_fpn,tv_fcos_resnet50_fpn,tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_ssdlite320_mobilenet_v3_large,timm_sequencer2d_s"
    tar czf $OUT/s9_det.tgz -C $OUT s9
    ;;
  cg)  # CUDA graphs at the defaults of mode="reduce-overhead" (measured placement) after the per-call weight and
       # buffer checks (1bd3d4e, 538d193, 2cda244): fp32 batch 16 (never run) and fp32 batch 1 again
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,detector \
      --configs fp32:16,fp32:1 --variants eager,inductor_ro,hybrid_cg_mp,ort_cg \
      --budget-s ${2:-420} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    tar czf $OUT/s9_cg.tgz -C $OUT s9/cg.md s9/cg.log
    ;;
  tests)  # the CUDA-graph, ordering and shared-frame tests on CUDA after the per-call checks changed
    timeout ${2:-280} python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_cuda_graphs.py \
      tests/test_cuda_ordering.py tests/test_shared_frames.py > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s9_tests.tgz -C $OUT s9/tests.log
    ;;
esac
