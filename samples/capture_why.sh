#!/usr/bin/env bash
# Capture the "why" workloads, each with its fix twin, and their ground truth, on ONE GPU
# (written for the lent H100; any single NVIDIA GPU with ncu works).
#
#   bash samples/capture_why.sh OUT_ROOT
#
# Under OUT_ROOT/why (logs/, SUMMARY.txt, ENV.txt, FAILURES.txt, SIZES.txt as capture_h200.sh):
#   eltwise_chain/   + _fixed   16 elementwise/norm ops on 256 MiB fp32, eager vs torch.compile
#   precision/       + _fixed   fp32 GEMM MLP with TF32 off vs bf16 autocast
#   cpu_optimizer/   + _fixed   Adam on the CPU (ZeRO-offload style) vs fused Adam on the GPU
#   preprocess/      + _fixed   CPU image preprocessing in the loop vs 12 DataLoader workers
#   recompile/       + _fixed   torch.compile recompiling each step (new length) vs mark_dynamic
#   graph_hooks/     + _fixed   Python host work between CUDA-graph replays vs none
#   conv_shapes/     + _fixed   CNN, new image side each step, cudnn.benchmark on vs off
#                    + _bucket  ... benchmark on, sides padded to multiples of 64 (warmed)
# and the before/after pairs for `profkit diff`:
#   attention_math/ attention_flash/   SDPA math backend vs FlashAttention
#   gpt_b8/ gpt_b32/                   the sample GPT at batch 8 vs 32 (same model)
#   kv_nocache/ kv_cache/              generation recomputing every token vs a KV cache
#   gpt_4l/ gpt_6l/                    4 layers x 8 x 512 tokens vs 6 layers x 16 x 256
# ncu/<name>.csv: Nsight Compute metrics (DRAM bytes, duration, tensor / FMA pipe activity,
# fp32 instruction counts) of the kernels of one steady step of eltwise_chain (eager and
# compiled) and precision (fp32 and bf16), --clock-control none (clocks are left alone);
# ncu/query_metrics.txt lists the metrics this ncu knows for the chip.
# Every capture prints its PROFKIT_SAMPLE line (CUDA-event step times, FLOPs per step from
# FlopCounterMode, host-phase times) into SUMMARY.txt. Knobs: ONLY="name ..." captures just
# those; DEADLINE_S (default 500): no capture starts after that many seconds; TIMEOUT_S per
# capture (default 150); NCU (default ncu).
set -u -o pipefail
OUT=${1:?usage: capture_why.sh OUT_ROOT}
# shellcheck source=capture_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"
Z="$ROOT/samples/zoo"
W="$OUT/why"
mkdir -p "$W/ncu"
DEADLINE_S=${DEADLINE_S:-500}
NCU=${NCU:-ncu}

wanted() {  # wanted NAME: in $ONLY (or no ONLY) and before the deadline
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $1 "* ]]; then return 1; fi
  if [ $(( $(date +%s) - T0 )) -ge "$DEADLINE_S" ]; then
    echo "$1 skipped: past DEADLINE_S=$DEADLINE_S" | tee -a "$OUT/FAILURES.txt"; return 1
  fi
}

why() {  # why NAME SCRIPT ARGS...: one single-GPU capture into why/NAME (capture_lib.sh)
  wanted "$1" || return 0
  zoo_one "$@"
}

# ncu metrics: those of this list that ncu knows for the GPU (the rest are left out).
"$NCU" --version > "$W/ncu/ncu_version.txt" 2>&1
"$NCU" --query-metrics > "$W/ncu/query_metrics.txt" 2>&1
CANDIDATES=(gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum
  dram__throughput.avg.pct_of_peak_sustained_elapsed
  sm__throughput.avg.pct_of_peak_sustained_elapsed
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
  smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
  smsp__sass_thread_inst_executed_op_fadd_pred_on.sum
  smsp__sass_thread_inst_executed_op_fmul_pred_on.sum)
METRICS=()
for m in "${CANDIDATES[@]}"; do
  grep -qw -- "${m%%.*}" "$W/ncu/query_metrics.txt" && METRICS+=("$m")
done
[ ${#METRICS[@]} -ge 3 ] || METRICS=(gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum)
MLIST=$(IFS=,; echo "${METRICS[*]}")
echo "# ncu metrics: $MLIST" >> "$OUT/ENV.txt"

ncu_step() {  # ncu_step NAME SCRIPT ARGS...: kernels of step 3 (of 5, unprofiled) under ncu
  local name=$1 script=$2; shift 2
  wanted "ncu_$name" || return 0
  local t; t=$(date +%s)
  echo "=== [$((t - T0))s] ncu_$name"
  local cache; cache=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
  timeout --kill-after=10 "$TIMEOUT_S" "$NCU" --profile-from-start off --clock-control none \
    --launch-count 40 --metrics "$MLIST" --csv --log-file "$W/ncu/$name.csv" \
    "$PY" "$Z/$script.py" --profiler none --steps 5 --ncu-step 3 "$@" \
    > "$OUT/logs/ncu_$name.log" 2>&1
  local rc=$?
  rm -rf "$cache"
  echo "    rc=$rc in $(( $(date +%s) - t ))s"
  grep -h '^PROFKIT_SAMPLE' "$OUT/logs/ncu_$name.log" | sed "s|^|ncu_$name |" >> "$OUT/SUMMARY.txt"
  if [ $rc != 0 ]; then
    echo "ncu_$name rc=$rc (log: logs/ncu_$name.log)" >> "$OUT/FAILURES.txt"
    tail -n 15 "$OUT/logs/ncu_$name.log" "$W/ncu/$name.csv" 2>/dev/null | sed 's/^/    | /'
  fi
}

# The workloads with a known cause, and their twins without it.
why eltwise_chain eltwise_chain
why eltwise_chain_fixed eltwise_chain --compile
why precision precision
why precision_fixed precision --bf16
why cpu_optimizer cpu_optimizer
why cpu_optimizer_fixed cpu_optimizer --gpu-optimizer
why preprocess preprocess
why preprocess_fixed preprocess --workers 12
why graph_hooks graph_hooks
why graph_hooks_fixed graph_hooks --no-hooks
why recompile recompile --steps 7
why recompile_fixed recompile --steps 7 --mark-dynamic
why conv_shapes conv_shapes
why conv_shapes_fixed conv_shapes --no-benchmark
why conv_shapes_bucket conv_shapes --bucket 64
# Independent hardware counters for the memory-bound and the fp32-math workloads.
ncu_step eltwise_chain eltwise_chain
ncu_step precision_fp32 precision
ncu_step precision_bf16 precision --bf16
# Before/after pairs for profkit diff.
why attention_math attention
why attention_flash attention --flash
why gpt_b8 gpt_sizes --batch 8
why gpt_b32 gpt_sizes --batch 32
why kv_nocache kv_cache
why kv_cache kv_cache --kv-cache
why gpt_4l gpt_sizes --layers 4 --batch 8 --seq 512
why gpt_6l gpt_sizes --layers 6 --batch 16 --seq 256
ncu_step eltwise_chain_compiled eltwise_chain --compile

# ncu's CSV, less its own progress lines.
for f in "$W"/ncu/*.csv; do
  [ -f "$f" ] && grep '^"' "$f" > "$f.clean" && mv "$f.clean" "$f"
done
mv "$OUT/SUMMARY.txt" "$W/SUMMARY.txt" 2>/dev/null
cp "$OUT/ENV.txt" "$W/ENV.txt"
(cd "$OUT" && find . -type f ! -name SIZES.txt -printf '%10s  %P\n' | sort -k2) > "$OUT/SIZES.txt"
echo "=== done in $(( $(date +%s) - T0 ))s"
if [ -s "$OUT/FAILURES.txt" ]; then echo "=== FAILURES"; cat "$OUT/FAILURES.txt"; fi
