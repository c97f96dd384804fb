#!/usr/bin/env bash
# Device-call stages, session 32 (onnxruntime-gpu in /tmp/site from .chunk1-4, as session 28's). Logs under $OUT/s32.
# Usage: scripts/gpu_session32.sh chunk K | compare [budget_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s32 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  compare)  # the example detector in fp16 on the GPU, exported for replay: its top-k orders near-equal peaks
            # otherwise than eager (session 32's first call: export failed element-wise), so it is exported with
            # the detector's comparison and verified with and without it; then without it, for the message
    nvidia-smi --query-gpu=name --format=csv,noheader
    cat > /tmp/gpu_factories.py <<'PY'
from examples.factories import detector


def detector_fp16():
    model, x = detector()
    return model.cuda().half(), x.cuda().half()
PY
    cli="timeout ${2:-300} python3 -m hybrid_trt.export.cli"
    $cli export /tmp/gpu_factories.py:detector_fp16 --out /tmp/det16.pkg --quiet --rtol 0.1 --atol 0.1 \
      --option cuda_graphs=true --compare examples.factories:compare_detector > $L/export_compare.log 2>&1
    echo "export --compare rc=$?"; tail -3 $L/export_compare.log
    $cli verify /tmp/det16.pkg > $L/verify_plain.log 2>&1; echo "verify (no --compare) rc=$?"
    grep -E "reference|cuda_graphs" $L/verify_plain.log
    $cli verify /tmp/det16.pkg --compare examples.factories:compare_detector > $L/verify_compare.log 2>&1
    echo "verify --compare rc=$?"; grep -E "PASS|FAIL|SKIP" $L/verify_compare.log
    $cli export /tmp/gpu_factories.py:detector_fp16 --out /tmp/det16_plain.pkg --quiet --rtol 0.1 --atol 0.1 \
      --option cuda_graphs=true > $L/export_plain.log 2>&1
    echo "export (element-wise) rc=$?"; tail -3 $L/export_plain.log
    ;;
esac
