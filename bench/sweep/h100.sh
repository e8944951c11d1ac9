#!/usr/bin/env bash
# The H100 sweeps (real `dsx sweep`s) of the sweep study (issue 4, bench/sweep/README.md) and the estimator study
# (issue 5, bench/estimator/README.md), one `device` command at a time (kind nvidia-h100-x1), from the repo root,
# with the wheelhouse carried in .whl:
#     bash bench/sweep/h100.sh $OUT SECONDS STAGE...
# A command may run 10 minutes and the host keeps nothing: every sweep resumes from its results file in the
# checkout, so carry the rows back from $OUT/bench/... into the checkout between commands (SECONDS: the budget of
# this command; the running sweep is stopped with SIGINT when it is spent and its trial runs again next time).
# Stages, run in the order given (each a `dsx sweep` command as it ran; the scripts were bench/gpu/issue4_h100.sh,
# which ran bert-effects and gpt2xl in every command, and bench/gpu/issue5_h100.sh):
#   bert-effects  bert-base parameter effects (seq 512, ZeRO-1, micro-batch 64): vocab / seq / layers / hidden / ffn
#                 reduced one at a time                                               -> bench/sweep/h100/
#   gpt2xl        the gpt2-xl shape, ZeRO 1-3 x optimizer offload none/cpu x checkpointing off/on, micro-batch auto,
#                 every configuration (exhaustive)                                     -> bench/sweep/h100/
#   llama         llama-1b, ZeRO 0-3 x offload none/cpu: checkpointing off at micro-batch 8 and 16, on at 16, every
#                 trial measured (the predicted OOMs included)                         -> bench/estimator/h100/
#   bert-large    bert-large, ZeRO 0 and 3 x offload x checkpointing at micro-batch 64 (never run: no GPU time)
#                                                                                      -> bench/estimator/h100/
#   pruned        the gpt2xl grid WITH the estimate (default pruning), to compare its GPU-seconds and best
#                 configuration with the exhaustive sweep                              -> bench/estimator/h100/
# bert-effects and gpt2xl first ran before dsx had an estimate; --no-prune keeps them as they ran then (the gpt2xl
# sweep's last command already had it).
set -uo pipefail
usage="usage: bench/sweep/h100.sh OUT SECONDS STAGE... (stages: bert-effects gpt2xl llama bert-large pruned)"
out=${1:?$usage}
budget=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
start=$(date +%s)
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
sweeps=bench/sweep/h100 estimator=bench/estimator/h100
mkdir -p "$sweeps" "$estimator"
start_log "$out/sweep_h100_$(date -u +%Y%m%dT%H%M%SZ).log"
build_ops FusedAdamBuilder CPUAdamBuilder  # FusedAdam without offload, CPUAdam with it: once, before the sweeps
echo "ops built after $(( $(date +%s) - start )) s" >>"$log"
keep_copies "$out" "$sweeps/*.jsonl" "$estimator/*.jsonl"
left() { echo $(( budget - ($(date +%s) - start) )); }
sweep() { RUN_SIGNAL=INT run "$(left)" python3 -m dsx sweep "$@"; }

xl=(--model gpt2-xl --zero 1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto --mb-start 8 --mb-max 128
    --mb-tolerance 0.5 --steps 3 --warmup 2 --trial-timeout 300)
llama=(--model llama-1b --zero 0,1,2,3 --offload none,cpu --steps 2 --warmup 1 --trial-timeout 240 --no-prune
       --results "$estimator/llama1b.jsonl")
for stage in "$@"; do
  case $stage in
    bert-effects)
      sweep --model bert-base --zero 1 --micro-batch 64 --steps 5 --warmup 2 --one-at-a-time \
        --vary vocab_size=15000 --vary seq_len=256 --vary num_hidden_layers=6 --vary hidden_size=384 \
        --vary intermediate_size=1536 --trial-timeout 200 --results "$sweeps/bert_effects.jsonl" --no-prune ;;
    gpt2xl)
      sweep "${xl[@]}" --no-prune --results "$sweeps/gpt2xl.jsonl" ;;
    llama)
      sweep "${llama[@]}" --act-ckpt off --micro-batch 8,16
      sweep "${llama[@]}" --act-ckpt on --micro-batch 16 ;;
    bert-large)
      sweep --model bert-large --zero 0,3 --offload none,cpu --act-ckpt off,on --micro-batch 64 --steps 2 \
        --warmup 1 --trial-timeout 200 --no-prune --results "$estimator/bert_large.jsonl" ;;
    pruned)
      sweep "${xl[@]}" --results "$estimator/gpt2xl_pruned.jsonl" ;;
    *)
      echo "unknown stage $stage" >>"$log" ;;
  esac
done

copy_out "$out" "$sweeps/*.jsonl" "$estimator/*.jsonl"
show_log
