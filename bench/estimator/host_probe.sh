#!/usr/bin/env bash
# Does a host's speed explain the spread of eager and ZeRO-3 steps between machines of one GPU kind? On one GPU, from
# the repo root (kind nvidia-h200 or an H100 kind, carry [".whl"]; a fresh machine per device command):
#     bash bench/estimator/host_probe.sh $OUT        # ~5 min
# bench/estimator/host_probe.py (the CPU, interpreter speed, CPU op and CUDA launch cost), then gpt2-xl at ZeRO-3 and
# at ZeRO-1 (eager, the prelude's lean settings as bench/multigpu/run.sh's tuned_z3: vocabulary 50304, dropout 0,
# torch's fused AdamW, no clipping or overflow check; micro-batch 8 x 2, 5 timed steps after 2, no comms logger),
# then GPT-2 124M at ZeRO-1 and ZeRO-3 (micro-batch 8, 20 timed steps after 5, the overflow check on; added in the
# thirteenth session), then the probe again. Rows in $OUT/host_probe.jsonl (each with host_cpu), probes in
# $OUT/probe.jsonl. XL_ZEROS / SMALL_ZEROS (default "3 1" / "1 3") pick the stages of each model's rows.
set -uo pipefail
out=${1:?usage: bench/estimator/host_probe.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-560}"
mkdir -p "$out"
res=$out/host_probe.jsonl
start_log "$out/host_probe.log"
lscpu 2>/dev/null | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|CPU max MHz|CPU MHz)" >>"$log"
python3 bench/estimator/host_probe.py | tee -a "$out/probe.jsonl" >>"$log"
xl=(--model gpt2-xl "${lean[@]}" --micro-batch 8 --grad-accum 2 --steps 5 --warmup 2 --no-comm-log --gpus 1)
for zero in ${XL_ZEROS:-3 1}; do
  run_by "${RUN_S:-120}" python3 -m dsx run "${xl[@]}" --zero "$zero" --results "$res" </dev/null || true
done
# GPT-2 124M as bench/multigpu's comm2 runs it (dsx's overflow check on): its steps wait on the host
small=(--model gpt2 --vocab-pad 64 --seq-len 1024 --micro-batch 8 --steps 20 --warmup 5 "${adam[@]}" --gpus 1)
for zero in ${SMALL_ZEROS:-1 3}; do
  run_by "${RUN_S:-90}" python3 -m dsx run "${small[@]}" --zero "$zero" --results "$res" </dev/null || true
done
python3 bench/estimator/host_probe.py | tee -a "$out/probe.jsonl" >>"$log"
[ -s "$res" ] && python3 -m dsx report "$res" --vs-estimate >>"$log" 2>&1
show_log
