#!/usr/bin/env bash
# Device-call stages, session 33 (onnxruntime-gpu in /tmp/site from .chunk1-4, as session 28's). Logs under $OUT/s33.
# Usage: scripts/gpu_session33.sh chunk K | lidar [budget_s]
source scripts/gpu_stage_env.sh
gpu_stage_env s33 "${1:-}"
case ${1:?stage} in
  chunk)  # carry .chunkK; the fourth unpacks
    bash scripts/gpu_session6.sh chunk "${2:?K}"
    ;;
  lidar)  # issue 10: where the LiDAR example's hybrid compile loses to Inductor's (scripts/lidar_gap_probe.py)
    timeout ${2:-300} python3 scripts/lidar_gap_probe.py > $L/lidar_gap.log 2>&1
    echo "probe rc=$?"; grep -vE "^\s+host self" $L/lidar_gap.log | grep -E "^(WALL|PROFILE|  |[a-z_]+:)" | head -60
    ;;
esac
