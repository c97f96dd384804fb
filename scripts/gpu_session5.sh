#!/usr/bin/env bash
# Device-call stages for the H200 (onnxruntime-gpu in /tmp/site, spconv in /tmp/spsite), run from a `git archive`
# of the commit under test. Logs under $OUT/s5, returned as one tarball per stage.
# Usage: scripts/gpu_session5.sh checks|cg|sparse|conf
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s5; mkdir -p $L
case ${1:-checks} in
  checks)  # correctness on CUDA: placement (replay timing), CUDA graphs, the capture probe, stream ordering
    timeout 540 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py tests/test_capture_probe.py \
      tests/test_cuda_graphs.py tests/test_cuda_ordering.py > $L/tests.log 2>&1; echo "tests rc=$?"
    grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s5_checks.tgz -C $OUT s5
    ;;
  cg)  # CUDA graphs with measured placement (replay-timed) against Inductor reduce-overhead and ONNX Runtime's graph
    timeout 570 python3 benchmarks/bench_cudagraphs.py --no-lidar --models ${2:-resnet18,efficientnet_b0,convnext_tiny} \
      --configs ${3:-fp32:16,fp16:1} --variants inductor,inductor_ro,hybrid_cg,hybrid_cg_mp,ort_cg \
      --budget-s ${4:-480} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; tail -16 $L/cg.md
    grep -hE "placement measured" $L/cg.log | sort | uniq -c | cut -c1-260 | head -20
    tar czf $OUT/s5_cg.tgz -C $OUT s5/cg.md s5/cg.log
    ;;
  sparse)  # dynamic-range generic check (issue 9), then the LiDAR example end to end against native spconv
    timeout 120 python3 scripts/gpu_range_generic_check.py cuda > $L/range_generic.log 2>&1; echo "range generic rc=$?"
    tail -12 $L/range_generic.log | cut -c1-300
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 240 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/sparse_e2e.md > $L/sparse_e2e.log 2>&1
    echo "e2e rc=$?"; tail -9 $L/sparse_e2e.md
    tar czf $OUT/s5_sparse.tgz -C $OUT s5/range_generic.log s5/sparse_e2e.md s5/sparse_e2e.log
    ;;
  conf)  # conformance with measured placement on the models whose default rows were "slow", one lane per dtype
    m="${2:-tv_convnext_tiny,tv_fcos_resnet50_fpn,tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_maskrcnn_resnet50_fpn}"
    for dt in float16 float32; do
      (HYBRID_TRT_PLACEMENT=measured CONFORMANCE_LOG_DIR=$L/logs/mp_$dt timeout ${3:-500} python3 benchmarks/conformance.py \
         --device cuda --dtype $dt --models "$m" --timeout 200 --latency-s 1 --budget-min ${4:-7} \
         --note "H200; placement=measured (HYBRID_TRT_PLACEMENT); two lanes side by side" \
         --out $L/conf_mp_$dt.md > $L/conf_mp_$dt.log 2>&1) &
    done
    wait
    grep -hE "summary|FAILED|slow|MISMATCH|ok " $L/conf_mp_*.md | cut -c1-300
    tar czf $OUT/s5_conf.tgz -C $OUT s5/conf_mp_float16.md s5/conf_mp_float32.md s5/conf_mp_float16.log s5/conf_mp_float32.log
    ;;
esac
