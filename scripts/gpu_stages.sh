#!/usr/bin/env bash
# Device-call stages on the GPU machine (H100 or H200), onnxruntime-gpu in /tmp/site from .chunk1-4
# (`../shared/tools/pack-wheel-chunks.sh onnxruntime-gpu==1.31.1`). Logs under $OUT/gpu.
# Usage: scripts/gpu_stages.sh chunk K | spconv K | check [budget_s] [TEST_FILE...] | extra [budget_s] |
#        lidar [budget_s] | bench BUDGET_S BENCH_ARGS... | conf [budget_min] GROUP...
# It replaces one script per device session (scripts/gpu_sessionN.sh, named by the results files that ran them):
# those are in git history, `git show d7e383b:scripts/gpu_session26.sh` for example.
source scripts/gpu_stage_env.sh
gpu_stage_env gpu "$(case "${1:-}" in chunk|spconv) echo chunk;; *) echo "${1:-}";; esac)"
case ${1:?stage} in
  chunk)  # carry .chunkK, calls back to back (the machine keeps /tmp 30 s after a call); the fourth unpacks
    k=${2:?K}; mkdir -p /tmp/whl
    if [ "$k" = 1 ]; then cat .chunk1/part > /tmp/whl/site.tar.xz; else cat .chunk$k/part >> /tmp/whl/site.tar.xz; fi
    if [ "$k" = 4 ]; then
      mkdir -p /tmp/site && xz -dc /tmp/whl/site.tar.xz | tar xf - -C /tmp/site && echo unpacked
      python3 -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
    fi
    ;;
  spconv)  # carry .spconvK (scripts/pack_spconv.sh), back to back; native spconv for the sparse comparison
    k=${2:?K}; [ "$k" = 1 ] && cat .spconv1/part > /tmp/sp.tar.xz || cat .spconv$k/part >> /tmp/sp.tar.xz
    mkdir -p /tmp/spsite && xz -dc /tmp/sp.tar.xz 2>/dev/null | tar xf - -C /tmp/spsite 2>/dev/null && echo "spconv unpacked"
    ;;
  check)  # the GPU tests: packages verified in fresh processes (with and without engines), the whole runner,
          # CUDA graphs, stream ordering, the CUDA lowerings and attention; a test past 120 s has its stacks
          # written to $L/hang.log and its worker ended
    nvidia-smi --query-gpu=name --format=csv,noheader
    # the test files after the budget replace the default list (the CUDA-graph files alone, for example)
    budget=${2:-400}; shift $(( $# < 2 ? $# : 2 ))
    files=("$@"); [ ${#files[@]} -gt 0 ] || files=(tests/test_deployed_cuda_graphs.py tests/test_whole_graph.py
      tests/test_cuda_graphs.py tests/test_cuda_ordering.py tests/test_lowerings.py tests/test_attention.py)
    TEST_HANG_LOG=$L/hang.log TEST_HANG_EXIT_S=120 timeout $budget python3 -m pytest -v -p no:cacheprovider -n 8 \
      --dist load -rfE --durations=12 --junitxml=$L/check.xml "${files[@]}" \
      -k "deployed or fresh_process or cuda or whole or stream or bounded_dimension or shape_change" > $L/check.log 2>&1
    echo "tests rc=$?"; grep -E "FAILED|ERROR|XPASS|passed|failed|Timeout|^[0-9.]+s (call|setup)" $L/check.log | tail -40
    ;;
  extra)  # the GPU tests outside `check`: other devices' inputs, the GPU in the engine key, placement on CUDA,
          # frames shared by module instances on CUDA, and a model over 2 GB delegated and loaded warm (LARGE_TESTS);
          # then scripts/probe_special_values_cuda.py
    TEST_HANG_LOG=$L/hang.log TEST_HANG_EXIT_S=240 LARGE_TESTS=1 timeout ${2:-400} python3 -m pytest -v \
      -p no:cacheprovider -n 8 --dist load -rfE --junitxml=$L/extra.xml \
      tests/test_bad_input.py tests/test_engine_key.py tests/test_placement.py tests/test_shared_frames.py \
      tests/test_external_data.py -k "cuda or gpu or device or over_2gb" > $L/extra.log 2>&1
    echo "tests rc=$?"; grep -E "FAILED|ERROR|XPASS|passed|failed|Timeout" $L/extra.log | tail -25
    # the special-value lowerings on the CUDA provider (session 43: int64 sums and divisions, sign, remainder, pow)
    timeout 120 python3 scripts/probe_special_values_cuda.py > $L/special_values.log 2>&1; cat $L/special_values.log
    ;;
  lidar)  # issue 10: where the LiDAR example's hybrid compile loses to Inductor's (scripts/lidar_gap_probe.py)
    timeout ${2:-300} python3 scripts/lidar_gap_probe.py > $L/lidar_gap.log 2>&1
    echo "probe rc=$?"; grep -vE "^\s+host self" $L/lidar_gap.log | grep -E "^(WALL|PROFILE|  |[a-z_]+:)" | head -70
    ;;
  bench)  # issue 10: benchmarks/bench_cudagraphs.py with the given arguments, its log and table under $L
    budget=${2:?budget_s}; shift 2
    timeout $(( budget + 60 )) python3 benchmarks/bench_cudagraphs.py --budget-s $budget --out $L/cudagraphs.md "$@" \
      > $L/bench.log 2>&1
    echo "bench rc=$?"; tail -5 $L/bench.log; cat $L/cudagraphs.md 2>/dev/null | tail -30
    ;;
  conf)  # issue 7: conformance lanes, fp16 and fp32 per group (scripts/conf_lanes.sh)
    source scripts/conf_lanes.sh
    budget=${2:?budget_min}; shift 2
    conf_lanes $L/conf "$budget" "$(nvidia-smi --query-gpu=name --format=csv,noheader); $(( $# * 2 )) lanes shared the GPU and 16 cores" "$@"
    ;;
esac
