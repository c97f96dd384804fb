#!/usr/bin/env bash
# Device-call stages for the H200, session 21 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s21.
# Usage: scripts/gpu_session21.sh chunk K | lanes [budget_min] | cgr [budget_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s21 "${1:-}"
source scripts/conf_lanes.sh
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  lanes)  # issue 7: the ten timm models with no H200 row, and Faster R-CNN MobileNetV3 (its scatters are delegated
          # on CUDA since session 20), fp16 and fp32; beside them the CUDA tests of session 20's work: fp16 OpInfo
          # samples on the CUDA provider (scatters, fake quantization...), masked encoders, MQA/GQA, the BEV block,
          # and a bounded dimension under CUDA graphs
    cuda_test_lane $L 560 tests/test_lowerings.py tests/test_attention.py tests/test_cuda_graphs.py \
      -k "cuda or bounded_dimension or shape_change"
    conf_lanes $L "${2:-7}" "H200; four conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "tv_fasterrcnn_mobilenet_v3_large_320_fpn,timm_mobilenetv5_300m,timm_halonet26t,timm_botnet26t_256,timm_lambda_resnet26t,timm_efficientformerv2_s0" \
      "timm_hiera_tiny_224,timm_vit_small_patch16_rope_224,timm_nest_tiny,timm_tnt_s_patch16_224,timm_vitamin_small_224"
    tar xzf $L.tgz -O s21/tests.log | grep -E "^(FAILED|ERROR)|passed|failed|rc=" | tail -25
    ;;
  cgr)  # issue 10: fp16 batch 1 with README "Per-call cost"'s recipe (weights installed in the graph, dict tags) for
        # the three models ONNX Runtime's own graph beat; then the LiDAR example end to end, fp16
    timeout 320 python3 benchmarks/bench_cudagraphs.py --no-lidar --models mobilenet_v3_large,efficientnet_b0,convnext_tiny \
      --configs fp16:1 --variants inductor_ro,inductor_ro_recipe,hybrid_cg_mp,hybrid_cg_mp_recipe,ort_cg --rounds 5 \
      --budget-s ${2:-240} --grace-s 40 --out $L/cgr.md > $L/cgr.log 2>&1
    echo "cgr rc=$?"; cat $L/cgr.md
    timeout 170 python3 benchmarks/bench_cudagraphs.py --no-lidar --models lidar --configs fp16:1 \
      --variants eager,inductor,hybrid,hybrid_cg_mp --rounds 5 --budget-s 100 --grace-s 50 --out $L/lidar.md > $L/lidar.log 2>&1
    echo "lidar rc=$?"; cat $L/lidar.md
    tar czf $L-cgr.tgz -C $OUT s21/cgr.log s21/lidar.log && rm $L/cgr.log $L/lidar.log
    ;;
esac
