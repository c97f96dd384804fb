#!/usr/bin/env bash
# Device-call stages, session 26 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s26.
# Usage: scripts/gpu_session26.sh chunk K | w1 [bench_budget_s] | w2 [bench_budget_s] | lanes [budget_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s26 "${1:-}"
VARIANTS=inductor_ro,hybrid_cg_mp_whole,ort_cg
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  w1)  # issue 10: where the whole runner's host time goes (EfficientNet-B0, MobileNetV3-L), then the whole runner
       # at batch 16 fp16 and batch 1 fp32 on every model of the issue, against Inductor reduce-overhead and ONNX
       # Runtime's own graph
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 240 python3 benchmarks/probe_whole_runner_layers.py --models efficientnet_b0,mobilenet_v3_large \
      --out $L/layers.md > $L/layers.log 2>&1
    echo "layers rc=$?"; grep -E "^\||^- |^## " $L/layers.md || tail -20 $L/layers.log
    timeout ${2:-420} python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models mobilenet_v3_large,efficientnet_b0,convnext_tiny,resnet50,resnet18,detector --configs fp16:16,fp32:1 \
      --variants $VARIANTS --rounds 5 --budget-s $(( ${2:-420} - 45 )) --grace-s 35 --out $L/w1.md > $L/w1.log 2>&1
    echo "bench rc=$?"; grep -E "^\| [a-z]|not run" $L/w1.md
    ;;
  w2)  # issue 10: the rest: batch 1 fp16 of the models the H200 has not run the runner on, then batch 16 fp32
    timeout ${2:-540} python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet18,resnet50,detector,mobilenet_v3_large,efficientnet_b0,convnext_tiny --configs fp16:1,fp32:16 \
      --variants $VARIANTS --rounds 5 --budget-s $(( ${2:-540} - 45 )) --grace-s 35 --out $L/w2.md > $L/w2.log 2>&1
    echo "bench rc=$?"; grep -E "^\| [a-z]|not run" $L/w2.md
    ;;
  lanes)  # issues 10 and 7: the whole runner's tests after its CPU-only changes, and the CUDA test lane
    timeout ${2:-300} python3 -m pytest -q -p no:cacheprovider -n 8 --dist load -rfE --junitxml=$L/lanes.xml \
      tests/test_whole_graph.py tests/test_lowerings.py tests/test_attention.py tests/test_cuda_graphs.py \
      -k "cuda or whole or bounded_dimension or shape_change" > $L/lanes.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR|XPASS)|passed|failed" $L/lanes.log | tail -25
    ;;
esac
# Next GPU session, first: `w1` again (the probe now times Dynamo's guard check alone and keeps a cProfile of each
# variant's call): on this H100 the guard recipe took the runner's pointer check away but not the 0.15 ms of
# Dynamo's frame, where on the CPU (Python 3.12, torch 2.11, as the device machine) it halves the frame.
