#!/usr/bin/env bash
# Capture the diagnosis samples and the before/after pairs on ONE GPU (written for an H200).
#
#   bash samples/capture_diagnosis.sh OUT_ROOT
#
# Under OUT_ROOT/zoo (same layout and files as capture_h200.sh: logs/, SUMMARY.txt, ...):
#   transfer/ transfer_pageable/  1 GiB host->device per step, pinned / pageable
#   marker_steps/                 stock torch.profiler, no ProfilerStep#: steps are
#                                 record_function("train_step") ranges (compute workload)
#   graph_capture/ graph_capture_only/  CUDA-graph capture inside the window (+ replays / none)
#   dropped_kernels/              many tiny kernels with Kineto's GPU buffer limited to 1 MB
# Before/after pairs (the cause present, then removed with the GPU work unchanged):
#   host_sync/ + host_sync_removed/ (pageable read-backs vs pinned non_blocking),
#   round_trip/ + round_trip_removed/ (GPU result -> host work -> launch, vs on the GPU),
#   data_loading/ + data_loading_removed/,
#   cpu_launch/ + cpu_launch_graphs/ (eager vs CUDA graphs),
#   launch_sync/ + launch_nosync/ (syncs in a launch-bound loop: removing them saves little),
#   compute/ + compute_again/ (the same workload twice: a diff must say "unchanged").
# ONLY="name ..." captures just those.
set -u -o pipefail
OUT=${1:?usage: capture_diagnosis.sh OUT_ROOT}
# shellcheck source=capture_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"
Z="$ROOT/samples/zoo"
P=(--profiler "$PROFILER")

zoo() {  # zoo NAME SCRIPT ARGS...: one single-GPU capture into zoo/NAME (if in $ONLY)
  local name=$1 script=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  run "zoo_$name" "$OUT/zoo/$name" 0 "$PY" "$Z/$script.py" "${P[@]}" --out "$OUT/zoo/$name" "$@"
}

zoo transfer transfer
zoo transfer_pageable transfer --pageable
zoo marker_steps compute --profiler torch --step-marker train_step  # the later --profiler wins
zoo graph_capture graph_capture
zoo graph_capture_only graph_capture --capture-only
printf 'ACTIVITIES_MAX_GPU_BUFFER_SIZE_MB=1\n' > "$OUT/kineto_small_buffer.conf"
KINETO_CONFIG="$OUT/kineto_small_buffer.conf" zoo dropped_kernels cpu_launch --ops 20000
zoo host_sync host_sync
zoo host_sync_removed host_sync --pinned
zoo round_trip round_trip
zoo round_trip_removed round_trip --no-sync
zoo data_loading data_loading
zoo data_loading_removed data_loading --preload
zoo cpu_launch cpu_launch
zoo cpu_launch_graphs cpu_launch --cuda-graph
zoo launch_sync cpu_launch --sync-every 100
zoo launch_nosync cpu_launch
zoo compute compute
zoo compute_again compute
# Two GPUs: a host-side straggler (rank 1 sleeps before backward) and its twin without it.
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  for pair in "straggler_sleep straggler.py --extra-matmuls 0 --sleep-ms 3" "straggler_sleep_removed balanced.py" \
      "straggler_sleep40 straggler.py --extra-matmuls 0 --sleep-ms 40"; do
    read -r name script rest <<< "$pair"
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
    # shellcheck disable=SC2086
    run "zoo_$name" "$OUT/zoo/$name" 1 "${TORCHRUN[@]}" --nproc_per_node 2 "$Z/$script" \
      "${P[@]}" --out "$OUT/zoo/$name" $rest
  done
fi

(cd "$OUT" && find . -type f ! -name SIZES.txt -printf '%10s  %P\n' | sort -k2) > "$OUT/SIZES.txt"
echo "=== done in $(( $(date +%s) - T0 ))s"
if [ -s "$OUT/FAILURES.txt" ]; then echo "=== FAILURES"; cat "$OUT/FAILURES.txt"; fi
