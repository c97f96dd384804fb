#!/usr/bin/env bash
# Device-call stages for the H200 (onnxruntime-gpu in /tmp/site, spconv in /tmp/spsite), run from a `git archive`
# of the commit under test. Logs under $OUT/s4, returned as one tarball per stage.
# Usage: scripts/gpu_session4.sh checks|verify|sparse|cg|probe|conf|confnew [models fp16-models]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s4; mkdir -p $L
case ${1:-checks} in
  checks)  # correctness on CUDA: measured placement, CUDA graphs, sparse kernels, dynamic ranges (one at a time)
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py tests/test_cuda_graphs.py \
      tests/test_cuda_ordering.py > $L/tests.log 2>&1; echo "tests rc=$?"
    grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 200 python3 tests/plugins/sparse_triton_check.py cuda > $L/sparse_check.log 2>&1; echo "sparse check rc=$?"
    grep -E "TOTAL|FAIL" $L/sparse_check.log | tail -5
    timeout 90 python3 scripts/gpu_range_resnet_check.py cuda > $L/range_resnet.log 2>&1; echo "range resnet rc=$?"
    grep RANGE $L/range_resnet.log | cut -c1-600
    timeout 60 python3 scripts/gpu_range_check.py > $L/range.log 2>&1; echo "range rc=$?"; grep RANGE $L/range.log | cut -c1-400
    timeout 120 python3 scripts/gpu_range_generic_check.py cuda > $L/range_generic.log 2>&1; echo "range generic rc=$?"
    tail -12 $L/range_generic.log | cut -c1-300
    tar czf $OUT/s4_checks.tgz -C $OUT s4
    ;;
  verify)  # CUDA tests of placement, capture probe and graphs; fp16 lowerings on CUDA; dynamic ranges (issue 9)
    timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py tests/test_capture_probe.py \
      tests/test_cuda_graphs.py tests/test_cuda_ordering.py > $L/tests.log 2>&1; echo "tests rc=$?"
    grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_lowerings.py -k "cuda" > $L/lowerings_cuda.log 2>&1
    echo "lowerings cuda rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/lowerings_cuda.log | tail -15
    timeout 100 python3 scripts/gpu_range_generic_check.py cuda > $L/range_generic.log 2>&1; echo "range generic rc=$?"
    tail -12 $L/range_generic.log | cut -c1-300
    tar czf $OUT/s4_verify.tgz -C $OUT s4
    ;;
  confnew)  # conformance of the given models in fp32 and fp16, default options, two lanes per dtype
    i=0
    for dt in float32 float16; do
      for m in ${2:?models lane 1} ${3:?models lane 2}; do
        i=$((i+1))
        (CONFORMANCE_LOG_DIR=$L/logs/$dt$i timeout 550 python3 benchmarks/conformance.py --device cuda --dtype $dt \
           --models "$m" --timeout 200 --latency-s 1 --budget-min 8.5 \
           --note "H200; four lanes side by side (latency ratios within one process, GPU and cores shared)" \
           --out $L/confnew_${dt}_$i.md > $L/confnew_${dt}_$i.log 2>&1) &
      done
    done
    wait
    grep -hE "summary|FAILED|slow|MISMATCH" $L/confnew_*.md | cut -c1-300
    tar czf $OUT/s4_confnew.tgz -C $OUT s4
    ;;
  sparse)  # sparse layers and end to end against native spconv (nothing else on the GPU meanwhile)
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 60 python3 benchmarks/profile_sparse.py --dispatch > $L/profile_dispatch.log 2>&1; tail -12 $L/profile_dispatch.log
    timeout 280 python3 benchmarks/bench_sparse.py --runs 3 --out $L/sparse_layers.md > $L/sparse_layers.log 2>&1
    echo "layers rc=$?"; grep -A22 "^| case" $L/sparse_layers.md | head -24
    timeout 200 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/sparse_e2e.md > $L/sparse_e2e.log 2>&1
    echo "e2e rc=$?"; tail -9 $L/sparse_e2e.md
    tar czf $OUT/s4_sparse.tgz -C $OUT s4/profile_dispatch.log s4/sparse_layers.md s4/sparse_layers.log s4/sparse_e2e.md s4/sparse_e2e.log
    ;;
  cg)  # CUDA graphs with and without measured placement, fp16 batch 1 then batch 16, then fp32
    timeout 570 python3 benchmarks/bench_cudagraphs.py --models ${2:-resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,detector} \
      --configs ${3:-fp16:1,fp16:16} --variants eager,inductor,inductor_ro,hybrid,hybrid_cg,hybrid_mp,hybrid_cg_mp,ort_cg \
      --budget-s ${4:-480} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; tail -30 $L/cg.md
    tar czf $OUT/s4_cg.tgz -C $OUT s4/cg.md s4/cg.log
    ;;
  probe)  # the LiDAR harness discrepancy (issue 10), then the fp32 configurations not measured yet
    timeout 200 python3 scripts/lidar_harness_probe.py > $L/lidar_probe.log 2>&1; echo "probe rc=$?"
    grep -E "PROBE|placement|Error" $L/lidar_probe.log | cut -c1-300
    timeout 370 python3 benchmarks/bench_cudagraphs.py --no-lidar --models ${2:-resnet18,resnet50,detector} \
      --configs ${3:-fp32:16,fp32:1} --variants eager,inductor,inductor_ro,hybrid_cg,hybrid_cg_mp,ort_cg \
      --budget-s ${4:-300} --grace-s 40 --out $L/cg_fp32.md > $L/cg_fp32.log 2>&1
    echo "cg fp32 rc=$?"; tail -14 $L/cg_fp32.md
    tar czf $OUT/s4_probe.tgz -C $OUT s4/lidar_probe.log s4/cg_fp32.md s4/cg_fp32.log
    ;;
  conf)  # conformance with measured placement on the models whose default rows were "slow" (runs C-F), two lanes
    m="tv_convnext_tiny,tv_fcos_resnet50_fpn,tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_maskrcnn_resnet50_fpn,tv_resnet50"
    for dt in float16 float32; do
      (HYBRID_TRT_PLACEMENT=measured CONFORMANCE_LOG_DIR=$L/logs/mp_$dt timeout 520 python3 benchmarks/conformance.py \
         --device cuda --dtype $dt --models "$m" --timeout 200 --latency-s 1 --budget-min 7.5 \
         --note "H200; placement=measured (HYBRID_TRT_PLACEMENT); two lanes side by side" \
         --out $L/conf_mp_$dt.md > $L/conf_mp_$dt.log 2>&1) &
    done
    wait
    grep -hE "summary|FAILED|slow|MISMATCH" $L/conf_mp_*.md | cut -c1-300
    tar czf $OUT/s4_conf.tgz -C $OUT s4/conf_mp_float16.md s4/conf_mp_float32.md s4/conf_mp_float16.log s4/conf_mp_float32.log
    ;;
esac
