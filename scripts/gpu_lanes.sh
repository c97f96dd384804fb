#!/usr/bin/env bash
# One device call (H200) that runs the conformance suite on the models not yet run on the GPU, in parallel lanes
# (fp16 and fp32, three lanes each), next to a lane of CUDA-graph tests and diagnostics. onnxruntime-gpu must be
# unpacked in /tmp/site (and spconv in /tmp/spsite for the import check). Logs and tables go to $OUT/lanes.tgz.
# Usage: scripts/gpu_lanes.sh [budget_minutes]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
budget=${1:-6.5}
L=$OUT/lanes; mkdir -p $L
python3 -c "import torch, onnxruntime as o; print(torch.__version__, torch.cuda.get_device_name(), o.__version__, o.get_available_providers())"
PYTHONPATH=/tmp/spsite:$PYTHONPATH timeout 120 python3 -c "
import torch, spconv, spconv.pytorch as sp
conv = sp.SubMConv3d(16, 16, 3, indice_key='k').cuda().half()
idx = torch.unique(torch.randint(0, 64, (5000, 3), device='cuda', dtype=torch.int32), dim=0)
idx = torch.cat([torch.zeros(idx.shape[0], 1, dtype=torch.int32, device='cuda'), idx], 1)
x = sp.SparseConvTensor(torch.randn(idx.shape[0], 16, device='cuda').half(), idx, [64, 64, 64], 1)
y = conv(x); torch.cuda.synchronize(); print('spconv', spconv.__version__, 'ok', tuple(y.features.shape), float(y.features.float().norm()))
" > $L/spconv_check.log 2>&1; tail -3 $L/spconv_check.log
groups=(
  "tv_swin_t,tv_maxvit_t,tv_lraspp_mobilenet_v3_large,tv_deeplabv3_mobilenet_v3_large,tv_fcn_resnet50,tv_deeplabv3_resnet50,tv_r3d_18,tv_r2plus1d_18"
  "tv_ssdlite320_mobilenet_v3_large,tv_fasterrcnn_mobilenet_v3_large_320_fpn,tv_retinanet_resnet50_fpn,tv_fcos_resnet50_fpn,tv_fasterrcnn_resnet50_fpn,tv_ssd300_vgg16,tv_maskrcnn_resnet50_fpn"
  "timm_resnet18,timm_convnext_atto,timm_efficientnet_b0,timm_regnetx_002,timm_mobilenetv3_small_100,timm_mobilenetv4_conv_small,timm_vit_tiny_patch16_224,timm_swin_tiny_patch4_window7_224,timm_maxvit_rmlp_pico_rw_256,timm_efficientformer_l1,timm_fastvit_t8"
)
i=0
for dtype in float16 float32; do
  for g in "${groups[@]}"; do
    i=$((i+1))
    (timeout 570 python3 benchmarks/conformance.py --device cuda --dtype $dtype --models "$g" --timeout 200 \
       --latency-s 1 --budget-min $budget --note "H200; six conformance lanes and a test lane shared the GPU and 16 cores" \
       --out $L/conf_${dtype}_$i.md > $L/conf_${dtype}_$i.log 2>&1) &
  done
done
( timeout 400 python3 -m pytest -v -p xdist -n 2 -p no:cacheprovider --timeout=300 tests/test_cuda_graphs.py tests/test_capture_probe.py
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_ordering.py
  timeout 150 python3 scripts/cudagraph_pool_diag.py
) > $L/graphs.log 2>&1 &
wait
grep -E "passed|failed|FAILED|DIAG" $L/graphs.log | tail -30
grep -hE "summary" $L/conf_*.md
tar czf $OUT/lanes.tgz -C $OUT lanes
