# Sourced by scripts/gpu_stages.sh: the environment of a stage on the H200 (onnxruntime-gpu in /tmp/site from
# .chunk1-4, caches under /tmp), its log directory L=$OUT/TAG, and a refusal to run any stage but chunk on a machine
# without the CUDA provider (a released machine comes back without /tmp/site; a stage there would time the
# CPU-only onnxruntime, as session 17's first cg call did).
# gpu_stage_env TAG STAGE
gpu_stage_env() {
  set -uo pipefail
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
  # native spconv, where the spconv stage unpacked it (tests/plugins/test_spconv_twin.py runs against it)
  if [ -d /tmp/spsite ]; then export PYTHONPATH=$PYTHONPATH:/tmp/spsite; fi
  export HYBRID_TRT_CACHE_DIR=/tmp/htrt-cache TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache
  L=$OUT/$1; mkdir -p "$L"
  if [ "${2:-}" != chunk ] && ! python3 -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())"; then
    echo "onnxruntime-gpu is not in /tmp/site on this machine: stage the chunks again first"; exit 3
  fi
}
