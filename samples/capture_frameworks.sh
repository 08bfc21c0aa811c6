#!/usr/bin/env bash
# Capture the framework samples on a machine with 2 NVIDIA GPUs (written for 2 x H200):
# the Hugging Face Trainer and the Lightning Trainer, each profiled by profkit's callback,
# 2 ranks under torchrun (through profkit launch), plus an unprofiled run of each for the
# step time without the profiler.
#
#   bash samples/capture_frameworks.sh OUT_ROOT
#
# Writes, under OUT_ROOT:
#   ENV.txt                   as capture_h200.sh, plus the transformers / lightning versions
#   hf_trainer/               profkit run directory (run.json, traces/, nvml/, nccl/, ranks/)
#   lightning_train/          the same for Lightning
#   hf_trainer_none.log ...   (in logs/) the unprofiled runs' output: median step time
#   <run>.analysis.txt        `profkit analyze` of each run (beside it: a file in a run
#                             directory would be read as a foreign trace)
#   logs/, SUMMARY.txt, FAILURES.txt, SIZES.txt   as capture_h200.sh
# Knobs as capture_h200.sh: PYTHON, NPROC (default 2), TIMEOUT_S, SAMPLE_ARGS
# ("--tiny --device cpu" for a CPU dry run).
set -u -o pipefail

OUT=${1:?usage: capture_frameworks.sh OUT_ROOT}
# shellcheck source=capture_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"
S="$ROOT/samples"

# The import shim of capture_lib.sh (uninstalled checkout) maps the core, collectors,
# analyzers and dashboard; the integrations live in collectors/integrations.
if [ -n "${SHIM:-}" ] && [ ! -e "$SHIM/profkit/integrations" ]; then
  ln -s "$ROOT/collectors/integrations" "$SHIM/profkit/integrations"
fi
"$PY" - >> "$OUT/ENV.txt" 2>&1 <<'PYEOF'
import importlib
for name in ("transformers", "accelerate", "lightning", "pytorch_lightning"):
    try:
        print(f"# {name}", importlib.import_module(name).__version__)
    except Exception as e:  # noqa: BLE001 - record whatever is missing
        print(f"# {name} not importable: {e}")
PYEOF

for name in hf_trainer lightning_train; do
  run "${name}_none" "$OUT/${name}_none" 0 "${TORCHRUN[@]}" --nproc_per_node "$NPROC" \
    "$S/$name.py" --profiler none
  if [ $HAVE_PROFKIT = 1 ]; then
    run "$name" "$OUT/$name" 1 "${TORCHRUN[@]}" --nproc_per_node "$NPROC" "$S/$name.py" \
      --profiler profkit --out "$OUT/$name"
    if [ -f "$OUT/$name/run.json" ]; then
      "$PY" -m profkit analyze "$OUT/$name" > "$OUT/$name.analysis.txt" 2>&1 \
        || echo "$name: profkit analyze failed (see $name.analysis.txt)" >> "$OUT/FAILURES.txt"
    fi
  else
    echo "$name skipped: profkit.collectors not importable" >> "$OUT/FAILURES.txt"
  fi
done

(cd "$OUT" && find . -type f ! -name SIZES.txt -printf '%10s  %P\n' | sort -k2) > "$OUT/SIZES.txt"
echo "=== files (bytes, path under $OUT)"
cat "$OUT/SIZES.txt"
echo "=== done in $(( $(date +%s) - T0 ))s"
if [ -s "$OUT/FAILURES.txt" ]; then
  echo "=== FAILURES"; cat "$OUT/FAILURES.txt"; exit 1
fi
