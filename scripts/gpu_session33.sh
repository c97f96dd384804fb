#!/usr/bin/env bash
# Device-call stages, session 33 (onnxruntime-gpu in /tmp/site from .chunk1-4, as session 28's). Logs under $OUT/s33.
# Usage: scripts/gpu_session33.sh chunk K | lidar [budget_s] | fresh | segv | segv2
# "fresh" needs no chunk (a lease too short to stage them): the onnxruntime there has no CUDA provider, so every
# CUDA partition goes to Inductor, which is the case session 32's segfault was seen in (a package with no engine)
source scripts/gpu_stage_env.sh
gpu_stage_env s33 "$(case "${1:-}" in fresh|segv|segv2|segv3|test) echo chunk;; *) echo "${1:-}";; esac)"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  lidar)  # issue 10: where the LiDAR example's hybrid compile loses to Inductor's (scripts/lidar_gap_probe.py)
    timeout ${2:-300} python3 scripts/lidar_gap_probe.py > $L/lidar_gap.log 2>&1
    echo "probe rc=$?"; grep -vE "^\s+host self" $L/lidar_gap.log | grep -E "^(WALL|PROFILE|  |[a-z_]+:)" | head -60
    ;;
  fresh)  # session 32's segfault: hybrid_trt.load in a fresh process whose first CUDA work is the load
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 240 python3 -X faulthandler -m pytest -v -p no:cacheprovider -o addopts= -rfE \
      "tests/test_deployed_cuda_graphs.py::test_a_fresh_process_verifies_a_cuda_package[False]" > $L/fresh.log 2>&1
    echo "fresh-process test rc=$?"; grep -E "PASSED|FAILED|ERROR|passed|failed|Segmentation|Fatal" $L/fresh.log | head
    cat > /tmp/gpu_factories.py <<'PY'
from examples.factories import detector


def detector_fp16():
    model, x = detector()
    return model.cuda().half(), x.cuda().half()
PY
    cli="timeout 200 python3 -X faulthandler -m hybrid_trt.export.cli"
    $cli export /tmp/gpu_factories.py:detector_fp16 --out /tmp/det16.pkg --quiet --rtol 0.1 --atol 0.1 \
      --option cuda_graphs=true --compare examples.factories:compare_detector > $L/export.log 2>&1
    echo "detector fp16 export rc=$?"; tail -2 $L/export.log
    for flags in "" "--no-cuda-graphs"; do
      $cli verify /tmp/det16.pkg --compare examples.factories:compare_detector $flags > $L/verify$flags.log 2>&1
      echo "verify $flags rc=$?"; grep -E "PASS|FAIL|SKIP|Segmentation|Fatal" $L/verify$flags.log | head -8
    done
    timeout 60 python3 -X faulthandler -c "import hybrid_trt, torch; m = hybrid_trt.load('/tmp/det16.pkg'); \
print('bare load ok', type(m).__name__)" > $L/bare.log 2>&1; echo "bare load rc=$?"; tail -3 $L/bare.log
    ;;
  test)  # the GPU test of the fix, its case being the detector's package (no engine: no onnxruntime-gpu here)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts= -rfE \
      "tests/test_deployed_cuda_graphs.py::test_a_fresh_process_verifies_a_cuda_package[False]" 2>&1 | tail -4
    ;;
  segv3)  # the fix (export/api.py _cxx_runtime_loaded): verify and a bare load in fresh processes
    [ -d /tmp/det16.pkg ] || bash $0 segv > /dev/null 2>&1
    cli="timeout 100 python3 -X faulthandler -m hybrid_trt.export.cli"
    for flags in "" "--no-cuda-graphs"; do
      $cli verify /tmp/det16.pkg --compare examples.factories:compare_detector $flags > $L/v3$flags.log 2>&1
      echo "verify $flags rc=$?"; grep -E "PASS|FAIL|SKIP|Fatal" $L/v3$flags.log | head -8
    done
    timeout 60 python3 -X faulthandler -c "import hybrid_trt; m = hybrid_trt.load('/tmp/det16.pkg'); print('bare load ok')" 2>&1 | tail -2
    ;;
  segv2)  # segv: only importing onnxruntime first avoided it (torch's own loader crashed too): which side effect
    [ -d /tmp/det16.pkg ] || bash $0 segv > /dev/null 2>&1
    aoti=/tmp/det16.pkg/model.pt2; rm -rf /tmp/x && mkdir /tmp/x && (cd /tmp/x && python3 -m zipfile -e $aoti .)
    so=$(ls /tmp/x/model/data/aotinductor/model/*.so); ldd $so | grep -vE "linux-vdso|ld-linux"
    ort=$(python3 -c "import onnxruntime.capi as c, os; print(os.path.dirname(c.__file__))"); ls $ort | head
    ldd $ort/onnxruntime_pybind11_state*.so | grep -E "gomp|stdc|cud" ; nm -D --undefined-only $so | grep -ciE "omp|gomp"
    try() { echo "== $1"; timeout 120 python3 -X faulthandler -c "$2" > $L/segv2_$1.log 2>&1; echo "rc=$?"; tail -1 $L/segv2_$1.log; }
    try gomp "import ctypes; ctypes.CDLL('libgomp.so.1', mode=ctypes.RTLD_GLOBAL); import hybrid_trt; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    try pybind_only "import onnxruntime.capi._pybind_state; import hybrid_trt; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    try stdcxx "import ctypes; ctypes.CDLL('libstdc++.so.6', mode=ctypes.RTLD_GLOBAL); import hybrid_trt; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    try ort_after_torch "import torch, hybrid_trt, onnxruntime; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    ;;
  segv)  # "fresh" showed the segfault again (the detector's package; a small model's passed): where, and what avoids it
    nvidia-smi --query-gpu=name --format=csv,noheader
    cat > /tmp/gpu_factories.py <<'PY'
from examples.factories import detector


def detector_fp16():
    model, x = detector()
    return model.cuda().half(), x.cuda().half()
PY
    [ -d /tmp/det16.pkg ] || timeout 200 python3 -m hybrid_trt.export.cli export /tmp/gpu_factories.py:detector_fp16 \
      --out /tmp/det16.pkg --quiet --rtol 0.1 --atol 0.1 --option cuda_graphs=true \
      --compare examples.factories:compare_detector > $L/segv_export.log 2>&1; echo "export rc=$?"
    aoti=$(python3 -c "from hybrid_trt.export.package import AOTI_PACKAGE as a; print('/tmp/det16.pkg/' + a)")
    try() { echo "== $1"; timeout 120 python3 -X faulthandler -c "$2" > $L/segv_$1.log 2>&1; echo "rc=$?"; tail -2 $L/segv_$1.log; }
    try ort_first "import onnxruntime, hybrid_trt; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    try public_loader "import torch; torch.zeros(1, device='cuda'); m = torch._inductor.aoti_load_package('$aoti', device_index=0); print('ok')"
    try loader_index0 "import torch; torch.zeros(1, device='cuda'); from torch.export.pt2_archive._package import AOTICompiledModel; torch._C._aoti.AOTIModelPackageLoader('$aoti', 'model', False, 1, 0); print('ok')"
    try loader_index_m1 "import torch; torch.zeros(1, device='cuda'); torch._C._aoti.AOTIModelPackageLoader('$aoti', 'model', False, 1, -1); print('ok')"
    try cudnn_first "import torch; torch.nn.functional.conv2d(torch.randn(1,3,8,8,device='cuda',dtype=torch.half), torch.randn(4,3,3,3,device='cuda',dtype=torch.half)); import hybrid_trt; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    try inductor_first "import torch, torch._inductor.codecache, torch._inductor.compile_fx; torch.zeros(1, device='cuda'); import hybrid_trt; hybrid_trt.load('/tmp/det16.pkg'); print('ok')"
    ls -la /tmp/det16.pkg; python3 -c "import zipfile; z = zipfile.ZipFile('$aoti'); [print(i.filename, i.file_size) for i in z.infolist()]" 2>&1 | head -30
    echo "== gdb"; timeout 200 gdb -batch -ex run -ex bt --args python3 -c "import hybrid_trt; hybrid_trt.load('/tmp/det16.pkg')" > $L/gdb.log 2>&1
    grep -E "^#[0-9]+ " $L/gdb.log | head -30
    ;;
esac
