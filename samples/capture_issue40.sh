#!/usr/bin/env bash
# Capture the issue-40 samples on ONE GPU (written for a lent H200):
#
#   bash samples/capture_issue40.sh OUT_ROOT
#
# Under OUT_ROOT/why (logs/, SUMMARY.txt, ENV.txt, FAILURES.txt as capture_why.sh):
#   precision_h200/ precision_fp16/ precision_bf16/  the fp32 GEMM MLP (TF32 off) and its fp16
#                                                    and bf16 autocast twins, same sizes
#   attention_manual/ attention_flash_h200/          attention written by hand (matmul, mask,
#                                                    softmax, matmul) vs SDPA's FlashAttention
#   shard_wait/                                      5 steps, 3 recorded; every 5th batch the
#                                                    DataLoader opens a new shard (40 ms):
#                                                    the last recorded step waits for it
set -u -o pipefail
OUT=${1:?usage: capture_issue40.sh OUT_ROOT}
# shellcheck source=capture_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"
W="$OUT/why"
mkdir -p "$W"

zoo_one precision_h200 precision --steps 10
zoo_one precision_fp16 precision --steps 10 --fp16
zoo_one precision_bf16 precision --steps 10 --bf16
zoo_one attention_manual attention --steps 10 --manual
zoo_one attention_flash_h200 attention --steps 10 --flash
zoo_one shard_wait data_loading --steps 5 --slow-every 5 --fast-ms 5
