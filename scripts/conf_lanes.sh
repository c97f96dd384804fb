# Sourced by scripts/gpu_stages.sh (conf): conformance lanes side by side on the H200, one per (dtype, model group).
# conf_lanes LOGDIR BUDGET_MIN NOTE GROUP...   (each GROUP: comma-separated models, run in float16 and in float32)
# (each lane is killed after CONF_LANE_TIMEOUT_S seconds, 570 unless set)
conf_lanes() {
  local L=$1 budget=$2 note=$3 i=0 dt g
  mkdir -p "$L"
  shift 3
  for dt in float16 float32; do
    for g in "$@"; do
      i=$((i+1))
      (CONFORMANCE_LOG_DIR=$L/logs/$i timeout ${CONF_LANE_TIMEOUT_S:-570} python3 benchmarks/conformance.py --device cuda --dtype $dt \
         --models "$g" --timeout 200 --latency-s 1 --budget-min "$budget" --note "$note" \
         --out $L/conf_${dt}_$i.md > $L/conf_${dt}_$i.log 2>&1) &
    done
  done
  wait
  grep -hE "summary" $L/conf_*.md
  grep -hE "^\| " $L/conf_*.md | grep -E "MISMATCH|FAILED|slow" | cut -c1-400
  # One archive: the device returns only so many files per call (session 15 lost lanes' tables to that limit).
  tar czf $L.tgz -C $(dirname $L) $(basename $L) && rm -rf $L
}

# cuda_test_lane LOGDIR TIMEOUT_S TEST_FILE...   (in the background: the CUDA tests beside the lanes, log in LOGDIR)
cuda_test_lane() {
  local L=$1 t=$2
  shift 2
  (timeout "$t" python3 -m pytest -q -p no:cacheprovider "$@" > $L/tests.log 2>&1; echo "tests rc=$?" >> $L/tests.log) &
}
