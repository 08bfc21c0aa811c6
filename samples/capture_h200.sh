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

# Hard requirement of the lent H200 machines: never use NVLink multicast (NVLS).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

OUT=${1:?usage: capture_h200.sh OUT_ROOT}
PY=${PYTHON:-python3}
NPROC=${NPROC:-2}
TIMEOUT_S=${TIMEOUT_S:-150}
read -r -a XARGS <<< "${SAMPLE_ARGS:-}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
mkdir -p "$OUT/logs" "$OUT/zoo"
OUT=$(cd "$OUT" && pwd)
# Not the checkout: there, "python -m"/"-c" would import its bare profkit/ (no collectors).
cd "$OUT" || exit 1
T0=$(date +%s)
TORCHRUN=("$PY" -m torch.distributed.run --standalone)

# --- profkit importable? Without a pip install, map the checkout the way setup does. ------
if ! "$PY" -c 'import profkit.collectors' 2>/dev/null; then
  SHIM=$(mktemp -d)/site
  mkdir -p "$SHIM/profkit"
  for f in "$ROOT"/profkit/*; do ln -s "$f" "$SHIM/profkit/"; done
  for d in collectors analyzers dashboard; do ln -s "$ROOT/$d" "$SHIM/profkit/$d"; done
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
  echo "profkit is not installed: using the checkout through $SHIM"
fi
HAVE_PROFKIT=0
if "$PY" -c 'from profkit.collectors import mark, profile' > "$OUT/logs/profkit_import.log" 2>&1
then HAVE_PROFKIT=1
else tail -n 5 "$OUT/logs/profkit_import.log"
fi
HAVE_LAUNCH=0
"$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("profkit.collectors.launch") is None)' \
  2>/dev/null && HAVE_LAUNCH=1
PROFILER=${PROFILER:-profkit}
if [ "$PROFILER" = profkit ] && [ $HAVE_PROFKIT = 0 ]; then
  echo "profkit.collectors.profile cannot be imported: zoo and infer_kv use --profiler torch" \
    | tee -a "$OUT/FAILURES.txt"
  PROFILER=torch
fi

# --- environment record ---------------------------------------------------------------------
{
  echo "# date: $(date -Is)  host: $(hostname)  checkout: $ROOT"
  echo "# git: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null) $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files"
  echo "# nvidia-smi"; nvidia-smi 2>&1
  echo "# nvidia-smi topo -m"; nvidia-smi topo -m 2>&1
  echo "# torch.__version__, torch.version.cuda, torch.cuda.nccl.version()"
  "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' 2>&1
  "$PY" -c 'import sys; print("python", sys.version)' 2>&1
  echo "# profkit.collectors importable: $HAVE_PROFKIT, launch helper: $HAVE_LAUNCH, zoo profiler: $PROFILER"
  echo "# environment"; env | grep -E '^(NCCL_|TORCH_|NVSHMEM_|CUDA_|OMP_NUM_THREADS|PYTHONPATH)' | sort
} > "$OUT/ENV.txt"

# --- runner ---------------------------------------------------------------------------------
# run NAME RUN_DIR LAUNCH(0|1) CMD...: log to logs/NAME.log, record a failure, never abort.
run() {
  local name=$1 dir=$2 launch=$3; shift 3
  local cmd=("$@" "${XARGS[@]}")
  if [ "$launch" = 1 ] && [ $HAVE_LAUNCH = 1 ]; then
    cmd=("$PY" -m profkit.collectors.launch --run-dir "$dir" -- "${cmd[@]}")
  fi
  local t=$(date +%s)
  echo "=== [$((t - T0))s] $name: ${cmd[*]}"
  timeout --kill-after=10 "$TIMEOUT_S" "${cmd[@]}" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  echo "    rc=$rc in $(( $(date +%s) - t ))s"
  grep -h '^PROFKIT_SAMPLE' "$OUT/logs/$name.log" | sed "s|^|$name |" >> "$OUT/SUMMARY.txt"
  grep -h 'median step time' "$OUT/logs/$name.log" | sed 's/^/    /'
  if [ $rc != 0 ]; then
    echo "$name rc=$rc (log: logs/$name.log): ${cmd[*]}" >> "$OUT/FAILURES.txt"
    tail -n 15 "$OUT/logs/$name.log" | sed 's/^/    | /'
  fi
}
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
for name in compute cpu_launch data_loading host_sync; do
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
