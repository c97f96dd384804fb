#!/usr/bin/env bash
# Device-call stages, session 23 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s23.
# Usage: scripts/gpu_session23.sh chunk K | verify [test_s] | mini [test_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s23 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  verify)  # the fixes of the two failures and two float16 BEV defects this session's first GPU call found: CUDA
           # TopK on +inf keys (probe), float16 sort, range engines under CUDA graphs, Inductor's passes on torch 2.11
    nvidia-smi --query-gpu=name --format=csv,noheader > $L/gpu.txt
    timeout 60 python3 scripts/topk_cuda_probe.py > $L/topk.txt 2>&1
    timeout ${2:-240} python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_cuda_graphs.py tests/test_lowerings.py \
      -k "bounded_dimension or shape_change or alternat or user_stream or points_to_bev or (cuda and (sort or topk))" \
      > $L/tests.log 2>&1; echo "tests rc=$?" >> $L/tests.log
    cat $L/gpu.txt $L/topk.txt
    grep -E "^(FAILED|ERROR|XPASS)|passed|failed|rc=" $L/tests.log | tail -25
    ;;
  mini)  # verify with the least device time: the probe and the four tests that failed
    timeout 40 python3 scripts/topk_cuda_probe.py > $L/topk.txt 2>&1; cat $L/topk.txt
    timeout ${2:-100} python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_cuda_graphs.py tests/test_lowerings.py \
      -k "bounded_dimension_one_range_engine_under_graphs or (points_to_bev and cuda) or (cuda and sort and ties_nan)" \
      > $L/tests.log 2>&1; echo "tests rc=$?" >> $L/tests.log
    grep -E "^(FAILED|ERROR|XPASS)|passed|failed|rc=" $L/tests.log | tail -25
    ;;
esac
