#!/usr/bin/env bash
# Capture the memory, precision and parallelism samples on a machine with 4 NVIDIA GPUs
# (written for 4 x H200; with 2 GPUs the 4-rank cases are skipped).
#
#   bash samples/capture_large.sh OUT_ROOT
#
# Writes OUT_ROOT/memory/<case>/ (single GPU: samples/memory_cases.py) and
# OUT_ROOT/parallel/<case>/ (torchrun: samples/parallel_cases.py), each root with ENV.txt,
# SUMMARY.txt (each workload's PROFKIT_SAMPLE line: its labels), logs/ and FAILURES.txt.
# The single-GPU cases run on GPUs 2 and 3 while the 2-rank cases run on GPUs 0 and 1; the
# 4-rank cases run last, alone. A failing workload is recorded and the script goes on.
set -u -o pipefail
ROOT_OUT=${1:?usage: capture_large.sh OUT_ROOT [part]}
PART=${2:-all}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)

if [ "$PART" = all ]; then
  mkdir -p "$ROOT_OUT"
  bash "$0" "$ROOT_OUT" memA > "$ROOT_OUT/memA.out" 2>&1 &
  bash "$0" "$ROOT_OUT" memB > "$ROOT_OUT/memB.out" 2>&1 &
  bash "$0" "$ROOT_OUT" par2 > "$ROOT_OUT/par2.out" 2>&1 &
  wait
  [ "$NGPU" -ge 4 ] && bash "$0" "$ROOT_OUT" par4 > "$ROOT_OUT/par4.out" 2>&1
  cat "$ROOT_OUT"/*.out
  exit 0
fi

case $PART in mem*) OUT=$ROOT_OUT/memory ;; infer*) OUT=$ROOT_OUT/inference ;;
  *) OUT=$ROOT_OUT/parallel ;; esac
# shellcheck source=capture_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"
M=("$PY" "$HERE/memory_cases.py" --profiler profkit)
P=("$HERE/parallel_cases.py" --profiler profkit)
case $PART in
  memA)
    export CUDA_VISIBLE_DEVICES=$(( NGPU >= 4 ? 2 : 0 ))
    run varlen_default "$OUT/varlen_default" 0 "${M[@]}" --case varlen --steps 10 --active 6 \
      --out "$OUT/varlen_default"
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    run varlen_expandable "$OUT/varlen_expandable" 0 "${M[@]}" --case varlen --steps 10 \
      --active 6 --out "$OUT/varlen_expandable"
    unset PYTORCH_CUDA_ALLOC_CONF
    run empty_cache "$OUT/empty_cache" 0 "${M[@]}" --case empty_cache --out "$OUT/empty_cache"
    run no_empty_cache "$OUT/no_empty_cache" 0 "${M[@]}" --case empty_cache --no-empty-cache \
      --out "$OUT/no_empty_cache"
    run grow_oom "$OUT/grow_oom" 0 "${M[@]}" --case grow_oom --steps 6 --out "$OUT/grow_oom"
    ;;
  memB)
    export CUDA_VISIBLE_DEVICES=$(( NGPU >= 4 ? 3 : 0 ))
    run ckpt_on "$OUT/ckpt_on" 0 "${M[@]}" --case ckpt --out "$OUT/ckpt_on"
    run ckpt_off "$OUT/ckpt_off" 0 "${M[@]}" --case ckpt --no-ckpt --out "$OUT/ckpt_off"
    for g in fp8 bf16; do
      run "${g}_gemm" "$OUT/${g}_gemm" 0 "${M[@]}" --case fp8 --gemm $g --layers 8 --dim 8192 \
        --batch 16 --seq 512 --out "$OUT/${g}_gemm"
    done
    ;;
  par2)
    export CUDA_VISIBLE_DEVICES=0,1
    T2=("${TORCHRUN[@]}" --nproc_per_node 2)
    for s in 3 1; do
      name=experts_$([ $s = 1 ] && echo balanced || echo skew)
      run $name "$OUT/$name" 1 "${T2[@]}" "${P[@]}" --case experts --skew $s --tokens 65536 \
        --dim 2048 --out "$OUT/$name"
    done
    for u in linear block; do
      run fsdp_$u "$OUT/fsdp_$u" 1 "${T2[@]}" "${P[@]}" --case fsdp --unit $u --batch 8 --active 2 \
        --out "$OUT/fsdp_$u"
    done
    run tp_mlp "$OUT/tp_mlp" 1 "${T2[@]}" "${P[@]}" --case tp --batch 64 --out "$OUT/tp_mlp"
    [ "$NGPU" -lt 4 ] && for m in 4 16; do
      run pipeline2_m$m "$OUT/pipeline2_m$m" 1 "${T2[@]}" "${P[@]}" --case pipeline \
        --microbatches $m --batch 128 --active 2 --out "$OUT/pipeline2_m$m"
    done
    ;;
  par2z)  # DeepSpeed ZeRO-3 on 2 GPUs: DeepSpeed's defaults, then one knob changed per twin
    export CUDA_VISIBLE_DEVICES=0,1 DS_BUILD_OPS=0
    T2=("${TORCHRUN[@]}" --nproc_per_node 2)
    Z=(--case zero3 --batch 8 --steps 10 --active 2)
    run zero3_default "$OUT/zero3_default" 1 "${T2[@]}" "${P[@]}" "${Z[@]}" \
      --out "$OUT/zero3_default"
    run zero3_noprefetch "$OUT/zero3_noprefetch" 1 "${T2[@]}" "${P[@]}" "${Z[@]}" \
      --prefetch-bucket 0 --out "$OUT/zero3_noprefetch"
    run zero3_reduce1m "$OUT/zero3_reduce1m" 1 "${T2[@]}" "${P[@]}" "${Z[@]}" \
      --reduce-bucket 1e6 --out "$OUT/zero3_reduce1m"
    run zero3_persist "$OUT/zero3_persist" 1 "${T2[@]}" "${P[@]}" "${Z[@]}" \
      --persistence 1e7 --out "$OUT/zero3_persist"
    ;;
  infer)  # HF generate, one GPU: eager vs static cache + compile, batch 1 / 16, prompt 128 / 2048
    # 32 new tokens x 16 layers x 3 active steps made 20 MB traces (240k CPU ops): 8 tokens,
    # one active step; 16 tokens for a per-token spread
    I=("$PY" "$HERE/infer_hf.py" --profiler profkit --new-tokens 16 --steps 4 --active 1)
    run hf_eager "$OUT/hf_eager" 0 "${I[@]}" --out "$OUT/hf_eager"
    run hf_static_compiled "$OUT/hf_static_compiled" 0 "${I[@]}" --cache static --compile \
      --out "$OUT/hf_static_compiled"
    for b in 1 16; do
      run hf_b$b "$OUT/hf_b$b" 0 "${I[@]}" --batch $b --out "$OUT/hf_b$b"
    done
    for p in 128 2048; do
      run hf_prompt$p "$OUT/hf_prompt$p" 0 "${I[@]}" --prompt $p --out "$OUT/hf_prompt$p"
    done
    ;;
  inferkv)  # the sample GPT's KV-cache decode, eager vs one CUDA graph per token, batch 8 / 64
    K=("$PY" "$HERE/infer_kv.py" --profiler profkit --labels --steps 4 --active 1 --layers 8
       --dim 1024 --heads 16 --vocab 32000 --prompt 512 --new-tokens 32)
    run kv_eager_b8 "$OUT/kv_eager_b8" 0 "${K[@]}" --batch 8 --out "$OUT/kv_eager_b8"
    run kv_graph_b8 "$OUT/kv_graph_b8" 0 "${K[@]}" --batch 8 --graph-decode --out "$OUT/kv_graph_b8"
    run kv_graph_b64 "$OUT/kv_graph_b64" 0 "${K[@]}" --batch 64 --graph-decode \
      --out "$OUT/kv_graph_b64"
    # a model whose weights dominate the bytes per token: decode nearer the HBM roof
    run kv_graph_big_b8 "$OUT/kv_graph_big_b8" 0 "${K[@]}" --batch 8 --graph-decode \
      --layers 16 --dim 4096 --heads 32 --out "$OUT/kv_graph_big_b8"
    ;;
  fsdp1)  # FSDP1 (FullyShardedDataParallel) on 2 GPUs: every Linear its own unit vs per block
    export CUDA_VISIBLE_DEVICES=0,1
    T2=("${TORCHRUN[@]}" --nproc_per_node 2)
    for u in linear block; do
      run fsdp1_$u "$OUT/fsdp1_$u" 1 "${T2[@]}" "${P[@]}" --case fsdp --fsdp-version 1 --unit $u \
        --batch 8 --active 2 --out "$OUT/fsdp1_$u"
    done
    ;;
  tp)  # TP over every GPU: all-reduce TP eager, sequence parallel compiled, async TP compiled
    TN=("${TORCHRUN[@]}" --nproc_per_node "$NGPU")
    TPA=(--case tp --batch 32768 --dim 2048 --layers 8 --steps 10 --active 3)
    run tp_allreduce "$OUT/tp_allreduce" 1 "${TN[@]}" "${P[@]}" "${TPA[@]}" --out "$OUT/tp_allreduce"
    run tp_allreduce_m8 "$OUT/tp_allreduce_m8" 1 "${TN[@]}" "${P[@]}" "${TPA[@]}" \
      --tp-microbatches 8 --out "$OUT/tp_allreduce_m8"
    for mode in sp async; do
      run tp_$mode "$OUT/tp_$mode" 1 "${TN[@]}" "${P[@]}" "${TPA[@]}" --tp-mode $mode \
        --out "$OUT/tp_$mode"
    done
    ;;
  par4il)  # 1F1B against interleaved 1F1B (2 stages per rank), 8 microbatches, same batch
    T4=("${TORCHRUN[@]}" --nproc_per_node 4)
    PIPE=(--case pipeline --batch 64 --seq 1024 --dim 2048 --layers 16 --active 2 --microbatches 8)
    run pipeline_m8_1f1b "$OUT/pipeline_m8_1f1b" 1 "${T4[@]}" "${P[@]}" "${PIPE[@]}" \
      --schedule 1f1b --out "$OUT/pipeline_m8_1f1b"
    run pipeline_m8_interleaved "$OUT/pipeline_m8_interleaved" 1 "${T4[@]}" "${P[@]}" \
      "${PIPE[@]}" --schedule interleaved --stages-per-rank 2 --out "$OUT/pipeline_m8_interleaved"
    ;;
  par4)
    T4=("${TORCHRUN[@]}" --nproc_per_node 4)
    # per-microbatch work large enough that more microbatches pay (GPipe: bubble 43% -> 16%)
    PIPE=(--case pipeline --batch 64 --seq 1024 --dim 2048 --layers 16 --active 2)
    for m in 4 16; do
      run pipeline_m$m "$OUT/pipeline_m$m" 1 "${T4[@]}" "${P[@]}" "${PIPE[@]}" \
        --microbatches $m --out "$OUT/pipeline_m$m"
    done
    run pipeline_m16_1f1b "$OUT/pipeline_m16_1f1b" 1 "${T4[@]}" "${P[@]}" "${PIPE[@]}" \
      --microbatches 16 --schedule 1f1b --out "$OUT/pipeline_m16_1f1b"
    run mesh2x2 "$OUT/mesh2x2" 1 "${T4[@]}" "${P[@]}" --case mesh --out "$OUT/mesh2x2"
    run mesh2x2_hostbound "$OUT/mesh2x2_hostbound" 1 "${T4[@]}" "${P[@]}" --case mesh \
      --host-bound-rank 3 --out "$OUT/mesh2x2_hostbound"
    ;;
esac
(cd "$OUT" && find . -type f -printf '%10s  %P\n' | sort -k2) > "$OUT/SIZES_$PART.txt"
