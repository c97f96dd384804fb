#!/usr/bin/env bash
# Device-call stages for the H200, session 19 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s19.
# Usage: scripts/gpu_session19.sh chunk K | tests [pytest args...] | prof [budget_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s19 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  tests)  # CUDA tests, alone on the machine, so that pytest's own summary (a clean exit) comes back
    shift; t=$L/tests.log
    timeout 560 python3 -m pytest -q -p no:cacheprovider "$@" > $t 2>&1; echo "tests rc=$?" >> $t
    grep -E "^(FAILED|ERROR)|passed|failed|rc=" $t | tail -25
    ;;
  prof)  # issue 10: where an fp16 batch-1 call goes for the three models ONNX Runtime's own graph beat (session 18)
    timeout ${2:-560} python3 benchmarks/profile_cudagraph_call.py --models convnext_tiny,efficientnet_b0,mobilenet_v3_large \
      --configs fp16:1 --variants inductor_ro,hybrid_cg_mp,ort_cg,inductor_cg_flat --out $L/prof.md > $L/prof.log 2>&1
    echo "prof rc=$?"; grep -E "^(#|\| )" $L/prof.md | grep -v "^| \`" | head -60; tail -5 $L/prof.log
    ;;
  cgr)  # issue 10: the same three models, with README "Per-call cost"'s recipe (weights installed in the graph, dict tags)
    timeout 560 python3 benchmarks/bench_cudagraphs.py --no-lidar --models mobilenet_v3_large,efficientnet_b0,convnext_tiny \
      --configs fp16:1 --variants inductor_ro,inductor_ro_recipe,hybrid_cg_mp,hybrid_cg_mp_recipe,ort_cg --rounds 5 \
      --budget-s ${2:-480} --grace-s 40 --out $L/cgr.md > $L/cgr.log 2>&1
    echo "cgr rc=$?"; cat $L/cgr.md; tar czf $L-cgr.tgz -C $OUT s19/cgr.log && rm $L/cgr.log
    ;;
esac
