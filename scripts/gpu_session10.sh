#!/usr/bin/env bash
# Device-call stages for the H200, session 10 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s10.
# Usage: scripts/gpu_session10.sh chunk K | prof [models configs] | conf [budget_min] | cg [budget_s]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s10; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  prof)  # issue 10's open question: where a CUDA-graph call of hybrid_trt spends the time Inductor's does not
    timeout 560 python3 benchmarks/profile_cudagraph_call.py --models ${2:-resnet50,mobilenet_v3_large,resnet18} \
      --configs ${3:-fp32:16} --out $L/prof.md > $L/prof.log 2>&1
    echo "prof rc=$?"; grep -E "^\| |^## |^GPU activity" $L/prof.md | cut -c1-300
    ;;
  conf)  # the rows run N left (ssd300, ssdlite, sequencer2d_s), FCOS fp16's cut case again (the problem text now
         # lists eager's unpaired detections), and the 3-D pooling lowerings (S3D, R3D-18) on the GPU
    source scripts/conf_lanes.sh
    conf_lanes $L "${2:-6}" "H200; six conformance lanes side by side (three per dtype, GPU and 16 cores shared)" \
      "tv_fcos_resnet50_fpn,tv_s3d" "tv_ssd300_vgg16,tv_ssdlite320_mobilenet_v3_large" "timm_sequencer2d_s,tv_r3d_18"
    ;;
  cg)  # the fp32 batch-1 rows session 9 had no time for, at the reduce-overhead defaults
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,detector \
      --configs fp32:1 --variants eager,inductor_ro,hybrid_cg_mp,ort_cg \
      --budget-s ${2:-420} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    ;;
esac
