#!/usr/bin/env bash
# Device-call stages for the H200, session 18 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s18,
# archived per stage (the device returns only so many files per call).
# Usage: scripts/gpu_session18.sh chunk K | conf [budget_min] | cg [budget_s] [configs] | tests FILE...
source scripts/gpu_stage_env.sh
gpu_stage_env s18 "${1:-}"
source scripts/conf_lanes.sh
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  conf)  # issue 7: session 17's placement changes on the GPU (symbolic partitions measured at their traced shape,
         # bc49bad; opaque ops decomposed on Inductor's side, 0267102; the compiled fallback past the engine bound)
         # on the rows they were for (FCOS, Mask R-CNN, EVA02-T), with test_cuda_graphs.py beside the lanes
    cuda_test_lane $L 560 tests/test_cuda_graphs.py
    conf_lanes $L "${2:-7}" "H200; four conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "tv_fcos_resnet50_fpn,timm_eva02_tiny_patch14_224" "tv_maskrcnn_resnet50_fpn"
    tar xzf $L.tgz -O s18/tests.log | grep -E "^(FAILED|ERROR)|passed|failed|rc=" | tail -15
    ;;
  cg)  # issue 10: the configurations not measured since ea0a2b3, with the A/A pair of Inductor reduce-overhead
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models mobilenet_v3_large,resnet50,efficientnet_b0,detector,resnet18,convnext_tiny --configs ${3:-fp16:1} \
      --variants inductor_ro,inductor_ro_copy,hybrid_cg_mp,ort_cg --rounds 5 \
      --budget-s ${2:-450} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md; tar czf $L-cg.tgz -C $OUT s18/cg.log && rm $L/cg.log
    ;;
  tests)  # CUDA tests, alone on the machine, so that pytest's own summary (a clean exit) comes back
    shift; t=$L/tests-$(basename ${1%.py}).log
    timeout 560 python3 -m pytest -q -p no:cacheprovider "$@" > $t 2>&1; echo "tests rc=$?" >> $t
    grep -E "^(FAILED|ERROR)|passed|failed|rc=" $t | tail -20
    ;;
esac
