#!/usr/bin/env bash
# Does a host's speed explain the spread of eager and ZeRO-3 steps between machines of one GPU kind? On one GPU, from
# the repo root (kind nvidia-h200 or an H100 kind, carry [".whl"]; a fresh machine per device command):
#     bash bench/estimator/host_probe.sh $OUT        # ~3 min
# bench/estimator/host_probe.py (the CPU, interpreter speed, CPU op and CUDA launch cost), then gpt2-xl at ZeRO-3 and
# at ZeRO-1 (eager, the lean settings of bench/multigpu/run.sh's tuned_z3: vocabulary 50304, dropout 0, torch's
# fused AdamW, no clipping or overflow check; micro-batch 8 x 2, 5 timed steps after 2, no comms logger), then the
# probe again. Rows in $OUT/host_probe.jsonl (each with host_cpu), probes in $OUT/probe.jsonl.
set -uo pipefail
out=${1:?usage: bench/estimator/host_probe.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-540}"
mkdir -p "$out"
res=$out/host_probe.jsonl
start_log "$out/host_probe.log"
lscpu 2>/dev/null | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|CPU max MHz|CPU MHz)" >>"$log"
python3 bench/estimator/host_probe.py | tee -a "$out/probe.jsonl" >>"$log"
lean=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --tf32 --set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0
      --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true --ds-set gradient_clipping=0
      --ds-set bf16.check_grad_overflow=false --micro-batch 8 --grad-accum 2 --steps 5 --warmup 2 --no-comm-log
      --gpus 1)
for zero in 3 1; do
  run_by "${RUN_S:-120}" python3 -m dsx run "${lean[@]}" --zero "$zero" --results "$res" </dev/null || true
done
python3 bench/estimator/host_probe.py | tee -a "$out/probe.jsonl" >>"$log"
[ -s "$res" ] && python3 -m dsx report "$res" --vs-estimate >>"$log" 2>&1
show_log
