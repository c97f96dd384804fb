#!/usr/bin/env bash
# Device-call stages for the H200, session 17 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s17,
# archived per stage (the device returns only so many files per call).
# Usage: scripts/gpu_session17.sh chunk K | conf [budget_min] | cg [budget_s] | eva
source scripts/gpu_stage_env.sh
gpu_stage_env s17 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  conf)  # issue 7: the graph-break charge (55a9572) on the rows whole graphs kept slow (FCOS, Mask R-CNN) and the
         # other R-CNN; TResNet-M and MaxViT-rmlp-pico, which run Q's budget left; the CUDA tests after the review
         # fixes (capture stream, liability key) and a0b7e34's corrected placement test
    source scripts/conf_lanes.sh
    cuda_test_lane $L 560 tests/test_placement.py tests/test_cuda_ordering.py tests/test_cuda_graphs.py
    conf_lanes $L "${2:-7}" "H200; four conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "tv_fcos_resnet50_fpn,tv_maskrcnn_resnet50_fpn,timm_tresnet_m" \
      "tv_keypointrcnn_resnet50_fpn,timm_maxvit_rmlp_pico_rw_256"
    tar xzf $L.tgz -O s17/tests.log | grep -E "^(FAILED|ERROR)|passed|failed|rc=" | tail -15
    ;;
  cg)  # issue 10: fp16 batch 16 for every model after ea0a2b3, then fp32 batch 1, with an A/A pair of Inductor
       # reduce-overhead compiles (the spread a 1-2% ratio has to be read against)
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models mobilenet_v3_large,resnet50,efficientnet_b0,detector,resnet18,convnext_tiny --configs fp16:16,fp32:1 \
      --variants inductor_ro,inductor_ro_copy,hybrid_cg_mp,ort_cg --rounds 5 \
      --budget-s ${2:-480} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md; tar czf $L-cg.tgz -C $OUT s17/cg.log && rm $L/cg.log
    ;;
  eva)  # issue 7: EVA02-T alone on the GPU (its verdict flipped between shared-lane runs P and Q)
    CONFORMANCE_LOG_DIR=$L/eva-logs timeout 400 python3 benchmarks/conformance.py --device cuda --dtype float32 \
      --models timm_eva02_tiny_patch14_224 --timeout 200 --latency-s 1 --budget-min 6 \
      --note "H200; alone on the machine" --out $L/eva_fp32.md > $L/eva_fp32.log 2>&1
    CONFORMANCE_LOG_DIR=$L/eva-logs timeout 300 python3 benchmarks/conformance.py --device cuda --dtype float16 \
      --models timm_eva02_tiny_patch14_224 --timeout 200 --latency-s 1 --budget-min 4 \
      --note "H200; alone on the machine" --out $L/eva_fp16.md > $L/eva_fp16.log 2>&1
    grep -hE "^\| timm_eva" $L/eva_*.md | cut -c1-600; tar czf $L-eva.tgz -C $OUT s17/eva-logs s17/eva_fp32.log s17/eva_fp16.log && rm -rf $L/eva-logs $L/eva_*.log
    ;;
esac
