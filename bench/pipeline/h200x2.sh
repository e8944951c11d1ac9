#!/usr/bin/env bash
# Issue 18's pipeline part (written with issue 13; not run yet) on one host with 2 GPUs (kind nvidia-h200-x2), from the
# repo root, with the wheelhouse carried in .whl:
#     bash bench/pipeline/h200x2.sh $OUT STAGE...
# gpt2-xl (vocab padded to 50304, seq 1024), ZeRO-1, bf16, micro-batch 4, torch's fused AdamW, 5 timed steps after 2,
# on both GPUs, tokens/s against the micro-batches per optimizer step (--grad-accum 1,2,4,8,16):
#   pp  2 pipeline stages x 1 replica (each GPU holds half the layers; the 1F1B bubble is (2-1)/(m+2-1))
#   dp  ZeRO-1 data parallel over the 2 GPUs (each GPU the whole model; twice the samples per step)
# Each stage is one `dsx sweep` (5 trials, ~5 minutes: keep one stage per device command); rows go to
# $OUT/pipeline_h200x2.jsonl (a re-run with the file carried back resumes it), the log to $OUT/h200x2_STAGE.log, and
# the last stage's log ends with `dsx report`'s pipeline table and bench/pipeline/summary.py's tokens/s per m.
set -uo pipefail
usage="usage: bench/pipeline/h200x2.sh OUT STAGE... (stages: pp dp)"
out=${1:?$usage}
shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
res=$out/pipeline_h200x2.jsonl
common=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --zero 1 --precision bf16 --micro-batch 4
        --grad-accum 1,2,4,8,16 --gpus 2 --steps 5 --warmup 2 --trial-timeout 240 --no-prune --results "$res"
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
export RUN_SIGNAL=INT  # dsx sweep stops the running trial and exits; the rows so far stay
for stage in "$@"; do
  start_log "$out/h200x2_$stage.log"
  case $stage in
    pp) run 580 python3 -m dsx sweep "${common[@]}" --pipeline-stages 2 ;;
    dp) run 580 python3 -m dsx sweep "${common[@]}" ;;
    *) echo "bench/pipeline/h200x2.sh: unknown stage $stage ($usage)" >&2; exit 2 ;;
  esac
done
python3 -m dsx report "$res" --all --format markdown >>"$log" 2>&1
python3 bench/pipeline/summary.py "$res" >>"$log" 2>&1
show_log
