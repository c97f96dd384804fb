#!/usr/bin/env bash
# Device-call stages for the H200, session 8 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s8,
# returned as one tarball per stage.
# Usage: scripts/gpu_session8.sh chunk K | conf [budget_min] | tests [timeout] | final
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s8; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  conf)  # conformance at default options: the 13 models of the 2026-12-02 sweep (never run on a GPU), the rows
         # run K left for its budget, and the detectors/transformers after the float16 attention fix
    budget=${2:-8}
    lanes=(
      "timm_cspdarknet53,timm_cspresnet50,timm_ese_vovnet19b_dw,timm_res2net50_14w_8s,timm_tresnet_m,timm_mobileone_s0,timm_dpn68"
      "timm_hgnetv2_b0,timm_selecsls42b,timm_lcnet_050,timm_tinynet_e,timm_inception_next_tiny,timm_caformer_s18"
      "timm_dla34,timm_edgenext_xx_small,timm_pvt_v2_b0,timm_repvgg_a0,timm_rexnet_100,tv_mnasnet0_5,tv_shufflenet_v2_x1_0,tv_squeezenet1_1"
      "tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_keypointrcnn_resnet50_fpn,tv_vit_b_16,timm_beit_base_patch16_224,timm_cait_xxs24_224"
    )
    source scripts/conf_lanes.sh
    conf_lanes $L "$budget" "H200; eight conformance lanes side by side (latency ratios within one process, GPU and 16 cores shared)" "${lanes[@]}"
    tar czf $OUT/s8_conf.tgz -C $OUT s8
    ;;
  tests)  # the CUDA cases of the delegate and placement tests (not all run on the H200 since their last changes)
    timeout ${2:-500} python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_delegates.py \
      tests/test_placement.py > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s8_tests.tgz -C $OUT s8/tests.log
    ;;
  final)  # two lanes (one per dtype, nothing else on the GPU): the row run L found slow in shared lanes, the
          # model the indexing lowering now delegates whole, the row run L had no time for; then the tests
    for dt in float16 float32; do
      (CONFORMANCE_LOG_DIR=$L/logs/f_$dt timeout 230 python3 benchmarks/conformance.py --device cuda --dtype $dt \
         --models timm_inception_next_tiny,timm_tresnet_m,timm_dpn68 --timeout 150 --latency-s 2 --budget-min 3.5 \
         --note "H200; two conformance lanes side by side (one per dtype)" \
         --out $L/final_${dt}.md > $L/final_${dt}.log 2>&1) &
    done
    wait
    grep -hE "^\| timm" $L/final_*.md | cut -c1-300
    timeout 60 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_lowerings.py -k cuda > $L/lower16.log 2>&1
    echo "lowerings -k cuda rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/lower16.log | tail -8
    timeout 290 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_delegates.py \
      tests/test_placement.py > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    tar czf $OUT/s8_final.tgz -C $OUT s8
    ;;
esac
