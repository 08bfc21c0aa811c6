#!/usr/bin/env bash
# Capture every profkit sample workload on a machine with 2 NVIDIA GPUs (written for 2 x H200).
#
#   bash samples/capture_h200.sh OUT_ROOT
#
# Writes, under OUT_ROOT:
#   ENV.txt                 nvidia-smi, topology, torch / CUDA / NCCL versions, NCCL env
#   stock_ddp/              train_gpt DDP, stock torch.profiler (rank{R}.<ns>.pt.trace.json.gz)
#   profkit_ddp/            train_gpt DDP, profkit run directory (launch helper + torchrun)
#   profkit_fsdp/           train_gpt FSDP, profkit run directory
#   infer_kv/               KV-cache generation on 1 GPU, profkit run directory
#   zoo/<name>/             one run directory per bottleneck-zoo script
#   logs/<name>.log         stdout + stderr of each workload
#   SUMMARY.txt             the PROFKIT_SAMPLE line (median step time, ...) of each workload
#   FAILURES.txt            one line per workload that failed (absent when none did)
#   SIZES.txt               size of every file produced
# A failing workload is recorded and the script goes on. Environment knobs:
#   PYTHON (default python3), NPROC (default 2), TIMEOUT_S per workload (default 150),
#   PROFILER for infer_kv and the zoo (default profkit; torch if profkit cannot be imported),
#   SAMPLE_ARGS appended to every sample's options ("--tiny --device cpu" for a CPU dry run).
set -u -o pipefail

OUT=${1:?usage: capture_h200.sh OUT_ROOT}
# shellcheck source=capture_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"
S="$ROOT/samples"
Z="$S/zoo"

# (a) the bundled default sample: stock torch.profiler, DDP on 2 GPUs
run stock_ddp "$OUT/stock_ddp" 0 "${TORCHRUN[@]}" --nproc_per_node "$NPROC" "$S/train_gpt.py" \
  --parallel ddp --profiler torch --out "$OUT/stock_ddp"

# (b) train_gpt under profkit, DDP and FSDP
if [ $HAVE_PROFKIT = 1 ]; then
  for par in ddp fsdp; do
    run "profkit_$par" "$OUT/profkit_$par" 1 "${TORCHRUN[@]}" --nproc_per_node "$NPROC" \
      "$S/train_gpt.py" --parallel "$par" --profiler profkit --out "$OUT/profkit_$par"
  done
else
  echo "profkit_ddp, profkit_fsdp skipped: profkit.collectors not importable" >> "$OUT/FAILURES.txt"
fi

# (c) inference with a KV cache, 1 GPU
run infer_kv "$OUT/infer_kv" 0 "$PY" "$S/infer_kv.py" --profiler "$PROFILER" --out "$OUT/infer_kv"

# (d) the bottleneck zoo: single-GPU scripts, then the 2-rank ones
for name in compute cpu_launch data_loading host_sync round_trip; do
  run "zoo_$name" "$OUT/zoo/$name" 0 "$PY" "$Z/$name.py" --profiler "$PROFILER" \
    --out "$OUT/zoo/$name"
done
for name in communication straggler balanced; do
  run "zoo_$name" "$OUT/zoo/$name" 1 "${TORCHRUN[@]}" --nproc_per_node "$NPROC" "$Z/$name.py" \
    --profiler "$PROFILER" --out "$OUT/zoo/$name"
done

# --- what was produced ---------------------------------------------------------------------
(cd "$OUT" && find . -type f ! -name SIZES.txt -printf '%10s  %P\n' | sort -k2) > "$OUT/SIZES.txt"
echo "=== files (bytes, path under $OUT)"
cat "$OUT/SIZES.txt"
du -sh "$OUT"
echo "=== done in $(( $(date +%s) - T0 ))s"
if [ -s "$OUT/FAILURES.txt" ]; then
  echo "=== FAILURES"; cat "$OUT/FAILURES.txt"; exit 1
fi
