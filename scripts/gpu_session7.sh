#!/usr/bin/env bash
# Device-call stages for the H200, session 7 (onnxruntime-gpu in /tmp/site from .chunk1-4). Logs under $OUT/s7,
# returned as one tarball per stage.
# Usage: scripts/gpu_session7.sh chunk K | conf [budget_min] | probe | profile [timeout model] | tf32 | tests | graphs
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
L=$OUT/s7; mkdir -p $L
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks (session 6's stage)
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  conf)  # conformance at default options, four lanes per dtype (the models whose GPU rows predate the NHWC
         # rule, the pooling lowerings, the per-call weight check and the periodic synchronisation)
    budget=${2:-8}
    lanes=(
      "tv_fcos_resnet50_fpn,tv_maskrcnn_resnet50_fpn,tv_retinanet_resnet50_fpn,tv_ssd300_vgg16,tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_keypointrcnn_resnet50_fpn"
      "tv_resnet50,tv_mobilenet_v3_large,tv_efficientnet_b0,tv_convnext_tiny,tv_regnet_y_400mf,tv_densenet121,tv_googlenet,tv_inception_v3,tv_mnasnet0_5,tv_squeezenet1_1,tv_shufflenet_v2_x1_0"
      "timm_resnest14d,timm_nf_resnet26,timm_sequencer2d_s,timm_resnet18,timm_convnext_atto,timm_efficientnet_b0,timm_regnetx_002,timm_mobilenetv4_conv_small,timm_ghostnet_050,timm_hrnet_w18_small,timm_dla34,timm_repvgg_a0,timm_rexnet_100"
      "tv_deeplabv3_mobilenet_v3_large,tv_lraspp_mobilenet_v3_large,tv_fcn_resnet50,tv_r3d_18,tv_vit_b_16,tv_swin_t,timm_vit_tiny_patch16_224,timm_fastvit_t8,timm_efficientformer_l1,timm_mobilevit_xxs,timm_edgenext_xx_small,timm_pvt_v2_b0"
    )
    source scripts/conf_lanes.sh
    conf_lanes $L "$budget" "H200; eight conformance lanes side by side (latency ratios within one process, GPU and 16 cores shared)" "${lanes[@]}"
    tar czf $OUT/s7_conf.tgz -C $OUT s7
    ;;
  probe)  # (at 3978965 only, where scripts/ort_sync_probe.py and OnnxRuntimeEngine.sync_every exist)
    timeout 260 python3 scripts/ort_sync_probe.py --models tv_fcos_resnet50_fpn,tv_maskrcnn_resnet50_fpn \
      --dtype float16 > $L/probe.log 2>&1; echo "probe rc=$?"
    grep -vE "^\s*$" $L/probe.log | grep -vE "Warning|warn\(" | tail -30
    tar czf $OUT/s7_probe.tgz -C $OUT s7/probe.log
    ;;
  profile)  # where FCOS fp16's time goes: hybrid_trt (measured and delegate placement) against Inductor
    timeout ${2:-300} python3 scripts/profile_detector_gpu.py --model ${3:-tv_fcos_resnet50_fpn} > $L/profile.log 2>&1
    echo "profile rc=$?"; grep -E "^== |compiled in" $L/profile.log
    tar czf $OUT/s7_profile.tgz -C $OUT s7/profile.log
    ;;
  tf32)  # eager, Inductor and hybrid_trt against float64 (the nf_resnet26 fp32 row of this session's conf)
    timeout 200 python3 scripts/tf32_reference_check.py > $L/tf32.log 2>&1; echo "tf32 rc=$?"
    grep -E "allow_tf32" $L/tf32.log
    tar czf $OUT/s7_tf32.tgz -C $OUT s7/tf32.log
    ;;
  tests)  # CUDA tests: ordering (the periodic synchronisation), graphs, delegates, placement
    timeout ${2:-300} python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_cuda_ordering.py tests/test_delegates.py \
      tests/test_cuda_graphs.py tests/test_placement.py > $L/tests.log 2>&1
    echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | tail -15
    # the CUDA cases of the mostly-CPU test files
    timeout ${3:-200} python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_attention.py tests/test_bad_input.py \
      tests/test_lowerings.py tests/test_engine_key.py -k "cuda" > $L/tests_k.log 2>&1
    echo "tests -k cuda rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests_k.log | tail -15
    cp $L/tests_k.log $L/tests_k.txt 2>/dev/null
    tar czf $OUT/s7_tests.tgz -C $OUT s7/tests.log s7/tests_k.log
    ;;
  graphs)  # the float16 lowerings on the CUDA provider, then the CUDA-graph and ordering tests, in that order
    timeout 100 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_lowerings.py -k cuda > $L/lower16.log 2>&1
    echo "lowerings -k cuda rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/lower16.log | tail -8
    timeout ${2:-400} python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_cuda_graphs.py tests/test_cuda_ordering.py \
      > $L/graphs.log 2>&1
    echo "graphs rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/graphs.log | tail -15
    tar czf $OUT/s7_graphs.tgz -C $OUT s7/lower16.log s7/graphs.log
    ;;
esac
