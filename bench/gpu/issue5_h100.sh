#!/usr/bin/env bash
# Issue 5 evidence on one H100 (and the end of issue 4's exhaustive gpt2-xl sweep). A command may run 10 minutes
# and the host keeps nothing: every sweep resumes from its results file, carried back in between commands.
# Stages (run in the order given, each a real `dsx sweep`):
#   issue4        issue 4's exhaustive gpt2-xl sweep, resumed (bench/results/issue4/h100/gpt2xl.jsonl)
#   llama         llama-1b, ZeRO 0-3 x offload none/cpu: checkpointing off at micro-batch 8 and 16, on at 16
#                 (--no-prune: every trial measured, the predicted OOMs included)
#   bert          bert-large, ZeRO 0 and 3 x offload x checkpointing at micro-batch 64, --no-prune
#   pruned        issue 4's gpt2-xl grid WITH the estimate (default pruning), to compare its GPU-seconds and best
#                 configuration with the exhaustive sweep
# Usage on the host, from the repo root:  bash bench/gpu/issue5_h100.sh $OUT SECONDS STAGE...
set -uo pipefail
out=${1:?output dir}
budget=${2:-540}
shift 2
start=$(date +%s)
dir=bench/results/issue5/h100 name=issue5_h100
source bench/gpu/sweep_host.sh  # install, ops, $log, left, sweep
( while sleep 15; do cp bench/results/issue4/h100/gpt2xl.jsonl "$out"/issue4_gpt2xl.jsonl; done ) &

xl=(--model gpt2-xl --zero 1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto --mb-start 8 --mb-max 128
    --mb-tolerance 0.5 --steps 3 --warmup 2 --trial-timeout 300)
llama=(--model llama-1b --zero 0,1,2,3 --offload none,cpu --steps 2 --warmup 1 --trial-timeout 240 --no-prune
       --results "$dir/llama1b.jsonl")
for stage in "$@"; do
  case $stage in
    issue4) sweep "${xl[@]}" --no-prune --results bench/results/issue4/h100/gpt2xl.jsonl
            cp bench/results/issue4/h100/gpt2xl.jsonl "$out"/issue4_gpt2xl.jsonl ;;
    llama)  sweep "${llama[@]}" --act-ckpt off --micro-batch 8,16
            sweep "${llama[@]}" --act-ckpt on --micro-batch 16 ;;
    bert)   sweep --model bert-large --zero 0,3 --offload none,cpu --act-ckpt off,on --micro-batch 64 --steps 2 \
              --warmup 1 --trial-timeout 200 --no-prune --results "$dir/bert_large.jsonl" ;;
    pruned) sweep "${xl[@]}" --results "$dir/gpt2xl_pruned.jsonl" ;;
    *) echo "unknown stage $stage" >>"$log" ;;
  esac
done

cp "$dir"/*.jsonl "$out"/
grep -E "^\+|^exit|^\[|^sweep|fits up|seconds|^ops|^torch" "$log"
