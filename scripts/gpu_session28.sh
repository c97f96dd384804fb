#!/usr/bin/env bash
# Device-call stages, session 28 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s28.
# Usage: scripts/gpu_session28.sh chunk K | lanes [budget_s] | bench [budget_s] | w1 [bench_budget_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s28 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  lanes)  # issue 10: a loaded package in CUDA graphs (new), the whole runner's thread/stream tests (never run on a
          # GPU), and issue 7's CUDA lane
    nvidia-smi --query-gpu=name --format=csv,noheader
    # -v names each result as it comes; a test running past 120 s has its stacks written to $L/hang.log and its
    # worker ended, the run going on (session 30: one test failed and
    # one hung past 400 s, and the quiet output named neither)
    TEST_HANG_LOG=$L/hang.log TEST_HANG_EXIT_S=120 timeout ${2:-300} python3 -m pytest -v -p no:cacheprovider -n 8 --dist load -rfE --junitxml=$L/lanes.xml \
      tests/test_deployed_cuda_graphs.py tests/test_whole_graph.py tests/test_cuda_graphs.py tests/test_cuda_ordering.py \
      tests/test_lowerings.py tests/test_attention.py \
      -k "deployed or cuda or whole or stream or bounded_dimension or shape_change" > $L/lanes.log 2>&1
    echo "tests rc=$?"; grep -E "FAILED|ERROR|XPASS|passed|failed|Timeout" $L/lanes.log | tail -25
    ;;
  bench)  # issue 10: a loaded package in CUDA graphs against Inductor reduce-overhead, the compiled whole runner and
          # ONNX Runtime's own graph, fp16 batch 1
    timeout ${2:-300} python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models resnet18,mobilenet_v3_large,efficientnet_b0,resnet50,convnext_tiny,detector --configs fp16:1 \
      --variants inductor_ro,hybrid_cg_mp_whole,package_cg,ort_cg --rounds 5 --budget-s $(( ${2:-300} - 40 )) \
      --grace-s 30 --out $L/bench.md > $L/bench.log 2>&1
    echo "bench rc=$?"; grep -E "^\| [a-z]|not run|^- " $L/bench.md
    ;;
  w1)  # as session 26's w1 (layers probe, then the whole runner against reduce-overhead and ORT's own graph)
    bash scripts/gpu_session26.sh w1 "${2:-300}"
    ;;
esac
