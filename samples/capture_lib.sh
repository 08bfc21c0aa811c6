#!/usr/bin/env bash
# Shared by the capture scripts (sourced, not run): environment, profkit import shim,
# environment record and the run() helper. The caller sets OUT (the output root) first.
# Hard requirement of the lent H200 machines: never use NVLink multicast (NVLS).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

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

# zoo_one NAME SCRIPT ARGS...: one single-GPU capture of samples/zoo/SCRIPT.py into $W/NAME
# (the caller sets W), with fresh compiler caches: every compile in it is a real (cold) one.
zoo_one() {
  local name=$1 script=$2; shift 2
  local cache; cache=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
    run "why_$name" "$W/$name" 0 "$PY" "$ROOT/samples/zoo/$script.py" --profiler "$PROFILER" \
    --out "$W/$name" "$@"
  rm -rf "$cache"
}
