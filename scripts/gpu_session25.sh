#!/usr/bin/env bash
# Device-call stages, session 25 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s25.
# Usage: scripts/gpu_session25.sh chunk K | floor [budget_s] | topk | whole [bench_budget_s] | whole2 [bench_budget_s]
#        | prof_recipe
source scripts/gpu_stage_env.sh
gpu_stage_env s25 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  floor)  # issue 10: how far below ONNX Runtime's own graph a torch-side graph can go per call at fp16 batch 1 (the
          # three models its graph beat): trees with the recipe, Inductor's flat cudagraphify with the recipe, and
          # the floor (a hand capture: one copy, one replay, no Dynamo frame)
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout ${2:-300} python3 benchmarks/bench_cudagraphs.py --no-lidar --models mobilenet_v3_large,efficientnet_b0,convnext_tiny \
      --configs fp16:1 --variants inductor_ro,inductor_ro_recipe,inductor_cg_flat_recipe,cg_floor,ort_cg --rounds 5 \
      --budget-s $(( ${2:-300} - 40 )) --grace-s 30 --out $L/floor.md > $L/floor.log 2>&1
    echo "floor rc=$?"; cat $L/floor.md
    ;;
  whole)  # issue 10: the whole runner (cuda_graph_runner="whole"): its CUDA tests and the trees' beside them, then
          # fp16 batch 1 against Inductor reduce-overhead, ONNX Runtime's own graph and the floor
    timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 --dist load -rfE tests/test_whole_graph.py \
      tests/test_cuda_graphs.py > $L/whole_tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/whole_tests.log | tail -15
    timeout ${2:-380} python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models mobilenet_v3_large,efficientnet_b0,convnext_tiny,resnet18 --configs fp16:1 \
      --variants inductor_ro,hybrid_cg_mp,hybrid_cg_mp_whole,hybrid_cg_mp_whole_recipe,cg_floor,ort_cg --rounds 5 \
      --budget-s $(( ${2:-380} - 50 )) --grace-s 40 --out $L/whole.md > $L/whole.log 2>&1
    echo "bench rc=$?"; cat $L/whole.md
    ;;
  whole2)  # issue 10: after the first whole-runner run: the CUDA generator after a failed capture, the runner's tests
           # again, where EfficientNet-B0's call goes (its runner call exceeded the floor by 0.35 ms, the others' by
           # 0.13), and the other models and configurations
    timeout 30 python3 scripts/rng_after_failed_capture.py 2>&1 | tail -4
    timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 --dist load -rfE tests/test_whole_graph.py \
      > $L/whole2_tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/whole2_tests.log | tail -15
    timeout 120 python3 benchmarks/profile_cudagraph_call.py --models efficientnet_b0 --configs fp16:1 \
      --variants inductor_ro,hybrid_cg_mp_whole,cg_floor,ort_cg --out $L/prof_effnet.md > $L/prof.log 2>&1
    echo "prof rc=$?"; grep -A8 "^| variant" $L/prof_effnet.md | head -12
    timeout ${2:-260} python3 benchmarks/bench_cudagraphs.py --no-lidar --models resnet18,detector,resnet50 \
      --configs fp16:1,fp32:1 --variants inductor_ro,hybrid_cg_mp_whole,cg_floor,ort_cg --rounds 5 \
      --budget-s $(( ${2:-260} - 50 )) --grace-s 40 --out $L/whole2.md > $L/whole2.log 2>&1
    echo "bench rc=$?"; grep -E "^\| [a-z]" $L/whole2.md
    ;;
  prof_recipe)  # issue 10: EfficientNet-B0's whole-runner call with the guard recipe (no weights among the frame's
                # arguments), profiled beside the floor
    timeout 120 python3 benchmarks/profile_cudagraph_call.py --models efficientnet_b0 --configs fp16:1 \
      --variants hybrid_cg_mp_whole_recipe,cg_floor --rounds 5 --cprofile-calls 100 --out $L/prof_recipe.md > $L/prof_recipe.log 2>&1
    echo "prof rc=$?"; grep -A4 "^| variant" $L/prof_recipe.md | head -6
    ;;
  topk)  # issue 7: the finite TopK key's last form (float32 keeps a float32 key) on the CUDA provider, and its cost
    bash scripts/gpu_session24.sh topk
    ;;
esac
