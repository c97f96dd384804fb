#!/usr/bin/env bash
# Device-call stages for the H200, session 22 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s22.
# Usage: scripts/gpu_session22.sh chunk K | lanes [budget_min] | quick [test_s]
# (issue 10's recipe rows and LiDAR fp16 are session 21's stage, unchanged: scripts/gpu_session21.sh cgr)
source scripts/gpu_stage_env.sh
gpu_stage_env s22 "${1:-}"
source scripts/conf_lanes.sh
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  lanes)  # issue 7: the CUDA tests again after session 21's fixes (TopK's NaN key, fp16 samples eager cannot run,
          # the bounded CUDA-graph test) and the lowerings added since (search, sort, deform, antialiased resize,
          # 5-D grid_sample); a trace of the two float16 BEV defects; the three timm models left unrun, both dtypes, and
          # ViT-S RoPE again (session 21's fp16 row was slow where placement had measured a tie)
    if [ -f scripts/diag_s22.py ]; then (timeout 240 python3 scripts/diag_s22.py whole bounded > $L/diag.txt 2>&1) & fi
    cuda_test_lane $L 470 tests/test_lowerings.py tests/test_attention.py tests/test_cuda_graphs.py \
      -k "cuda or bounded_dimension or shape_change"
    conf_lanes $L "${2:-5}" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); four conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "timm_botnet26t_256,timm_lambda_resnet26t,timm_efficientformerv2_s0" "timm_vit_small_patch16_rope_224"
    tar xzf $L.tgz -O s22/tests.log | grep -E "^(FAILED|ERROR|XPASS)|passed|failed|rc=" | tail -25
    tar xzf $L.tgz -O s22/diag.txt | grep -E "^(===|dtypes|########|[A-Za-z]*Error)" | head -40
    ;;
  quick)  # what is left of the budget after a machine was taken back mid-call: the float16 BEV trace and the CUDA
          # tests of what changed since session 21's GPU run (TopK's NaN key, the new lowerings, the bounded
          # CUDA-graph test), no conformance lanes
    if [ -f scripts/diag_s22.py ]; then (timeout 170 python3 scripts/diag_s22.py whole bounded > $L/diag.txt 2>&1) & fi
    timeout ${2:-200} python3 -m pytest -q -p no:cacheprovider tests/test_lowerings.py tests/test_cuda_graphs.py \
      -k "(cuda and (sort or topk or roi_align or col2im or bucketize or searchsorted or deform or grid_sampler_3d or _aa or points_to_bev or constant_pad)) or bounded_dimension" \
      > $L/tests.log 2>&1; echo "tests rc=$?" >> $L/tests.log
    wait
    grep -E "^(FAILED|ERROR|XPASS)|passed|failed|rc=" $L/tests.log | tail -25
    grep -E "^(===|dtypes|########|[A-Za-z]*Error)" $L/diag.txt | head -40
    ;;
esac
