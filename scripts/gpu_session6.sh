#!/usr/bin/env bash
# Device-call stages for the H200, session 6 (onnxruntime-gpu in /tmp/site from .chunk1-4, spconv in /tmp/spsite
# from .spconv1). Logs under $OUT/s6, returned as one tarball per stage.
# Usage: scripts/gpu_session6.sh chunk K | layout | cg [models configs budget] | lidar | conf [models] | tests | sparse
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s6; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    k=${2:?K}; mkdir -p /tmp/whl
    if [ "$k" = 1 ]; then cat .chunk1/part > /tmp/whl/site.tar.xz; else cat .chunk$k/part >> /tmp/whl/site.tar.xz; fi
    ls -la /tmp/whl
    if [ "$k" = 4 ]; then
      mkdir -p /tmp/site && xz -dc /tmp/whl/site.tar.xz | tar xf - -C /tmp/site && echo unpacked
      python3 -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
    fi
    ;;
  spconv)  # carry .spconv1
    mkdir -p /tmp/spsite && xz -dc .spconv1/part | tar xf - -C /tmp/spsite && echo spconv unpacked
    ;;
  layout)  # ONNX Runtime CUDA provider, NCHW against NHWC, whole models under its own CUDA graph
    timeout 300 python3 scripts/ort_layout_probe.py --out $L/layout.md > $L/layout.log 2>&1; echo "layout rc=$?"
    cat $L/layout.md 2>/dev/null || tail -30 $L/layout.log
    tar czf $OUT/s6_layout.tgz -C $OUT s6
    ;;
  tests)  # CUDA tests with ONNX Runtime's CUDA sessions NHWC (graphs, ordering, placement, delegates)
    HYBRID_TRT_ONNXRUNTIME_CUDA_LAYOUT=${2:-nhwc} timeout ${3:-280} python3 -m pytest -q -p no:cacheprovider -x \
      tests/test_cuda_graphs.py tests/test_cuda_ordering.py tests/test_delegates.py > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s6_tests.tgz -C $OUT s6/tests.log
    ;;
  cg)  # CUDA graphs: NCHW against NHWC sessions, with and without measured placement
    timeout 590 python3 benchmarks/bench_cudagraphs.py --no-lidar \
      --models ${2:-resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,detector} \
      --configs ${3:-fp16:1,fp16:16} \
      --variants eager,inductor_ro,hybrid_cg,hybrid_cg_nhwc,hybrid_cg_mp_nhwc,ort_cg \
      --budget-s ${4:-500} --grace-s 40 --out $L/cg.md > $L/cg.log 2>&1
    echo "cg rc=$?"; cat $L/cg.md
    tar czf $OUT/s6_cg.tgz -C $OUT s6/cg.md s6/cg.log
    ;;
  lidar)  # the LiDAR example end to end, uncaptured and captured, NCHW and NHWC, delegate and measured
    timeout 400 python3 benchmarks/bench_cudagraphs.py --models lidar --configs fp16:1 --no-lidar \
      --variants eager,inductor,hybrid,hybrid_nhwc,hybrid_mp,hybrid_mp_nhwc,hybrid_cg_mp_nhwc \
      --budget-s 330 --grace-s 40 --out $L/lidar.md > $L/lidar.log 2>&1
    echo "lidar rc=$?"; cat $L/lidar.md
    tar czf $OUT/s6_lidar.tgz -C $OUT s6/lidar.md s6/lidar.log
    ;;
  conf)  # conformance, default options (the defaults under test), two lanes per dtype
    m1=${2:-tv_convnext_tiny,tv_fcos_resnet50_fpn}; m2=${3:-tv_maskrcnn_resnet50_fpn,tv_fasterrcnn_mobilenet_v3_large_320_fpn}
    for dt in float16 float32; do
      for m in $m1 $m2; do
        (CONFORMANCE_LOG_DIR=$L/logs/$dt$m timeout 520 python3 benchmarks/conformance.py --device cuda --dtype $dt \
           --models "$m" --timeout 220 --latency-s 1 --budget-min 7.5 \
           --note "H200; four lanes side by side (latency ratios within one process, GPU and cores shared)" \
           --out $L/conf_${dt}_${m%%,*}.md > $L/conf_${dt}_${m%%,*}.log 2>&1) &
      done
    done
    wait
    grep -hE "summary|FAILED|slow|MISMATCH" $L/conf_*.md | cut -c1-300
    tar czf $OUT/s6_conf.tgz -C $OUT s6
    ;;
  sparse)  # the LiDAR example against spconv end to end (bench_sparse --e2e-spconv), three runs
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 300 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/sparse_e2e.md > $L/sparse_e2e.log 2>&1
    echo "e2e rc=$?"; tail -12 $L/sparse_e2e.md
    tar czf $OUT/s6_sparse.tgz -C $OUT s6/sparse_e2e.md s6/sparse_e2e.log
    ;;
esac
