#!/usr/bin/env bash
# Device-call stages for the H200 (onnxruntime-gpu in /tmp/site, spconv in /tmp/spsite). Logs under $OUT.
# Usage: scripts/gpu_session2.sh verify|cgbench|sparse
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s2; mkdir -p $L
conf() {  # dtype models out-name budget-min [extra env]
  (timeout 285 python3 benchmarks/conformance.py --device cuda --dtype $1 --models "$2" --timeout 150 --latency-s 1 \
     --budget-min $4 --note "H200; conformance lanes and a test lane shared the GPU and 16 cores" \
     --out $L/$3.md > $L/$3.log 2>&1) &
}
case ${1:-verify} in
  verify)
    det="tv_ssdlite320_mobilenet_v3_large,tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_retinanet_resnet50_fpn,tv_fcos_resnet50_fpn"
    rest="tv_fasterrcnn_resnet50_fpn,tv_ssd300_vgg16,tv_maskrcnn_resnet50_fpn,timm_efficientformer_l1,timm_fastvit_t8"
    conf float16 "$det" det16 3.3; conf float32 "$det" det32 3.3
    conf float16 "$rest" rest16 3.3; conf float32 "$rest" rest32 3.3
    (CUDA_LAUNCH_BLOCKING=1 timeout 280 python3 benchmarks/conformance.py --device cuda --dtype float32 \
       --models tv_fasterrcnn_mobilenet_v3_large_320_fpn --timeout 260 --latency-s 0.2 --out $L/frcnn_blocking.md \
       > $L/frcnn_blocking.log 2>&1) &
    ( timeout 250 python3 -m pytest -v -p xdist -n 3 -p no:cacheprovider --timeout=300 tests/test_cuda_graphs.py \
        tests/test_capture_probe.py tests/test_cuda_ordering.py tests/test_delegates.py
      timeout 40 python3 scripts/cudagraph_pool_diag.py
    ) > $L/graphs.log 2>&1 &
    wait
    grep -E "^(FAILED|ERROR)|passed|failed|DIAG" $L/graphs.log | tail -25
    grep -hE "summary" $L/*.md
    tar czf $OUT/s2_verify.tgz -C $OUT s2
    ;;
  cgbench)
    timeout 300 python3 benchmarks/bench_cudagraphs.py --no-lidar --variants eager,inductor_ro,hybrid,hybrid_cg,ort_cg --budget-s ${2:-210} --grace-s 40 --out $L/cudagraphs_h200.md \
      > $L/cgbench.log 2>&1; tail -45 $L/cudagraphs_h200.md
    tar czf $OUT/s2_cg.tgz -C $OUT s2
    ;;
  sparse)
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 45 python3 tests/plugins/sparse_triton_check.py cuda > $L/triton_check.log 2>&1; grep -E "TOTAL" $L/triton_check.log
    timeout 120 python3 benchmarks/profile_sparse.py --out $L/profile_rulebooks.md > $L/profile.log 2>&1; tail -4 $L/profile.log
    timeout 250 python3 benchmarks/bench_sparse.py --runs 3 --out $L/sparse_spconv_h200.md > $L/sparse_layers.log 2>&1
    tail -3 $L/sparse_layers.log
    timeout 125 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/sparse_spconv_e2e_h200.md > $L/sparse_e2e.log 2>&1
    tail -8 $L/sparse_spconv_e2e_h200.md
    tar czf $OUT/s2_sparse.tgz -C $OUT s2
    ;;
esac
