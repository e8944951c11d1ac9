#!/usr/bin/env bash
# Issue 4 evidence on one H100: two real `dsx sweep`s, resumed across commands (a command may run 10 minutes and
# the host keeps nothing, so each command re-runs the same sweeps and they go on from the results files that
# were carried back in).
#   1. parameter effects on bert-base (seq 512, ZeRO-1, micro-batch 64): vocab / seq / layers / hidden / ffn
#      reduced one at a time;
#   2. gpt2-xl shape: ZeRO 1-3 x optimizer offload none/cpu x activation checkpointing off/on, micro-batch auto.
# Usage on the host, from the repo root:  bash bench/gpu/issue4_h100.sh $OUT [SECONDS]
set -uo pipefail
out=${1:?output dir}
budget=${2:-540}
start=$(date +%s)
dir=bench/results/issue4/h100 name=issue4_h100
source bench/gpu/sweep_host.sh  # install, ops, $log, left, sweep

sweep --model bert-base --zero 1 --micro-batch 64 --steps 5 --warmup 2 --one-at-a-time \
  --vary vocab_size=15000 --vary seq_len=256 --vary num_hidden_layers=6 --vary hidden_size=384 \
  --vary intermediate_size=1536 --trial-timeout 200 --results "$dir/bert_effects.jsonl"
sweep --model gpt2-xl --zero 1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto --mb-start 8 \
  --mb-max 128 --mb-tolerance 0.5 --steps 3 --warmup 2 --trial-timeout 300 --results "$dir/gpt2xl.jsonl"

cp "$dir"/*.jsonl "$out"/
grep -E "^\+|^exit|^\[|^sweep|fits up|seconds|^ops|^torch" "$log"
