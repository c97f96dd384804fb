#!/usr/bin/env bash
# Device-call stages, session 24 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s24.
# Usage: scripts/gpu_session24.sh chunk K | lanes [budget_min] | mini TEST_S K_EXPR | topk
# (issue 10's recipe rows and LiDAR fp16: scripts/gpu_session21.sh cgr)
source scripts/gpu_stage_env.sh
gpu_stage_env s24 "${1:-}"
source scripts/conf_lanes.sh
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  lanes)  # issue 7: the whole CUDA test lane once more, this time to the end (no -x; a JUnit file names every test
          # that ran), with session 23's fixes (range engines' torch-allocated outputs under CUDA graphs, float16
          # sort keys, Inductor's two torch 2.11 passes off); the CUDA TopK probe; beside it the conformance rows
          # never run on a GPU and ViT-S RoPE again
    nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt
    (timeout 60 python3 scripts/topk_cuda_probe.py > $L/topk.txt 2>&1) &
    (timeout 480 python3 -m pytest -q -p no:cacheprovider -n 8 --dist load -rfE --junitxml=$L/tests.xml \
       tests/test_lowerings.py tests/test_attention.py tests/test_cuda_graphs.py \
       -k "cuda or bounded_dimension or shape_change" > $L/tests.log 2>&1; echo "tests rc=$?" >> $L/tests.log) &
    CONF_LANE_TIMEOUT_S=500 conf_lanes $L "${2:-5}" "$(cat $L/gpu.txt | head -1); conformance lanes side by side (two per dtype) and a CUDA test lane (GPU and 16 cores shared)" \
      "timm_botnet26t_256,timm_lambda_resnet26t,timm_efficientformerv2_s0" "timm_vit_small_patch16_rope_224"
    tar xzf $L.tgz -O s24/gpu.txt s24/topk.txt
    tar xzf $L.tgz -O s24/tests.log | grep -E "^(FAILED|ERROR|XPASS)|passed|failed|rc=" | tail -30
    ;;
  mini)  # the failures of lanes again after a fix, with the CUDA TopK probe: mini TEST_S -K_EXPRESSION
    timeout 60 python3 scripts/topk_cuda_probe.py 2>&1 | tail -40
    timeout ${2:-200} python3 -m pytest -q -p no:cacheprovider -n 8 --dist load -rfE tests/test_lowerings.py \
      tests/test_attention.py tests/test_cuda_graphs.py -k "${3:?-k expression}" > $L/mini.log 2>&1
    echo "mini rc=$?"; grep -E "^(FAILED|ERROR|XPASS)|passed|failed" $L/mini.log | tail -25
    ;;
  topk)  # the finite TopK key (Clip form) on the CUDA provider, and its cost against the float32 key
    timeout 90 python3 -m pytest -q -p no:cacheprovider -n 8 --dist load -rfE tests/test_lowerings.py \
      -k "finite_key or (cuda and (sort or topk))" > $L/topk_tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/topk_tests.log | tail -10
    timeout 90 python3 benchmarks/bench_topk_key.py --device cuda --rounds 200 --out $L/topk_key.md 2>&1 | tail -8
    ;;
esac
