#!/usr/bin/env bash
# Device-call stages for the H200 (onnxruntime-gpu in /tmp/site, spconv in /tmp/spsite), run from a `git archive`
# of the commit under test. Logs (workers' full logs too) under $OUT, returned as one tarball per stage.
# Usage: scripts/gpu_session3.sh verify|sparse|cg-new|cg-configs
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s3; mkdir -p $L
conf() {  # dtype models out-name budget-min [per-model timeout]
  (CONFORMANCE_LOG_DIR=$L/logs/$3 timeout 540 python3 benchmarks/conformance.py --device cuda --dtype $1 --models "$2" \
     --timeout ${5:-200} --latency-s 1 --budget-min $4 \
     --note "H200; five conformance lanes and a test lane shared the GPU and 16 cores" \
     --out $L/$3.md > $L/$3.log 2>&1) &
}
case ${1:-verify} in
  verify)
    r50="tv_retinanet_resnet50_fpn,tv_fcos_resnet50_fpn,tv_fasterrcnn_resnet50_fpn,tv_maskrcnn_resnet50_fpn"
    rest="timm_efficientformer_l1,timm_fastvit_t8,tv_convnext_tiny,tv_swin_t,tv_resnet18,tv_resnet50"
    conf float16 "$r50" r50_16 7.0; conf float32 "$r50" r50_32 7.0
    conf float16 "$rest" rest16 7.0; conf float32 "$rest" rest32 7.0
    (CUDA_LAUNCH_BLOCKING=1 CONFORMANCE_LOG_DIR=$L/logs/blocking timeout 540 python3 benchmarks/conformance.py \
       --device cuda --dtype float32 --models tv_fasterrcnn_resnet50_fpn --timeout 500 --latency-s 0.2 \
       --out $L/frcnn_r50_blocking.md > $L/frcnn_r50_blocking.log 2>&1) &
    ( timeout 420 python3 -m pytest -v -p xdist -n 3 -p no:cacheprovider --timeout=400 tests/test_cuda_graphs.py \
        tests/test_capture_probe.py tests/test_cuda_ordering.py tests/test_delegates.py
      timeout 40 python3 scripts/cudagraph_pool_diag.py
    ) > $L/graphs.log 2>&1 &
    wait
    grep -E "^(FAILED|ERROR)|passed|failed|DIAG" $L/graphs.log | tail -25
    grep -hE "summary|FAILED|not run" $L/*.md | cut -c1-300
    tar czf $OUT/s3_verify.tgz -C $OUT s3
    ;;
  verify2)  # after the end-of-run sync fix: the R50-FPN detectors, the CUDA-graph tests, CUDA lowering, ranges
    r50="tv_retinanet_resnet50_fpn,tv_fcos_resnet50_fpn,tv_fasterrcnn_resnet50_fpn,tv_maskrcnn_resnet50_fpn"
    conf float16 "$r50" v2_r50_16 6.5 150; conf float32 "$r50" v2_r50_32 6.5 150
    ( timeout 400 python3 -m pytest -v -p xdist -n 3 -p no:cacheprovider --timeout=380 tests/test_cuda_graphs.py \
        tests/test_capture_probe.py tests/test_cuda_ordering.py tests/test_delegates.py
      timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_lowerings.py -k \
        "generic_form_is_nan_and_inf_exact_on_onnxruntime_cuda"
      timeout 60 python3 scripts/gpu_range_check.py
    ) > $L/graphs2.log 2>&1 &
    wait
    grep -E "^(FAILED|ERROR)|passed|failed|RANGE|Fatal|Aborted" $L/graphs2.log | tail -25
    grep -hE "summary|FAILED|not run" $L/v2_*.md | cut -c1-300
    grep -lh "terminate called\|CUDA failure" -r $L/logs/v2_* 2>/dev/null | head
    tar czf $OUT/s3_verify2.tgz -C $OUT s3/graphs2.log s3/v2_r50_16.md s3/v2_r50_32.md s3/logs/v2_r50_16 s3/logs/v2_r50_32
    ;;
  final)  # after the sync fix and the -inf repair: LiDAR end to end vs spconv, CUDA max-pool lowering, ranges
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 40 python3 -m pytest -q -p no:cacheprovider tests/test_lowerings.py -k "generic_form" > $L/final_tests.log 2>&1
    tail -2 $L/final_tests.log
    timeout 100 python3 scripts/gpu_range_check.py > $L/range.log 2>&1; echo "range rc=$?"; grep RANGE $L/range.log
    timeout 120 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 2 --out $L/sparse_e2e_final.md \
      > $L/sparse_e2e_final.log 2>&1; echo "e2e rc=$?"
    tail -8 $L/sparse_e2e_final.md; grep -c "terminate called" $L/sparse_e2e_final.log
    tar czf $OUT/s3_final.tgz -C $OUT s3/final_tests.log s3/range.log s3/sparse_e2e_final.md s3/sparse_e2e_final.log
    ;;
  cg-new)  # the models and the LiDAR example not measured yet, fp16 batch 1
    timeout 420 python3 benchmarks/bench_cudagraphs.py --models efficientnet_b0,convnext_tiny --configs fp16:1 \
      --budget-s ${2:-330} --grace-s 40 --out $L/cudagraphs_h200_new.md > $L/cg_new.log 2>&1
    tail -20 $L/cudagraphs_h200_new.md
    tar czf $OUT/s3_cg_new.tgz -C $OUT s3/cudagraphs_h200_new.md s3/cg_new.log
    ;;
  cg-configs)  # fp32 batch 1 and fp16 batch 16
    timeout 560 python3 benchmarks/bench_cudagraphs.py --no-lidar --models resnet18,resnet50,mobilenet_v3_large,detector \
      --configs fp32:1,fp16:16,fp32:16 --budget-s ${2:-480} --grace-s 40 --out $L/cudagraphs_h200_configs.md \
      > $L/cg_configs.log 2>&1
    tail -30 $L/cudagraphs_h200_configs.md
    tar czf $OUT/s3_cg_configs.tgz -C $OUT s3/cudagraphs_h200_configs.md s3/cg_configs.log
    ;;
  sparse)
    export PYTHONPATH=/tmp/spsite:$PYTHONPATH
    timeout 250 python3 benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out $L/sparse_spconv_e2e_h200.md \
      > $L/sparse_e2e.log 2>&1
    tail -12 $L/sparse_spconv_e2e_h200.md
    timeout 280 python3 benchmarks/bench_sparse.py --runs 3 --out $L/sparse_spconv_h200.md > $L/sparse_layers.log 2>&1
    tail -3 $L/sparse_layers.log
    tar czf $OUT/s3_sparse.tgz -C $OUT s3/sparse_spconv_e2e_h200.md s3/sparse_spconv_h200.md s3/sparse_e2e.log s3/sparse_layers.log
    ;;
esac
