#!/usr/bin/env bash
# Where a data-parallel step goes on two GPUs against one (issue 30 item 5: GPT-2 124M's eager ZeRO-1/2 rows on 2
# H200s run 33-59% slower than the estimate, which halves each rank's per-parameter work). From the repo root:
#     bash bench/estimator/dp_profile.sh $OUT        # kind nvidia-h200-x2, carry [".whl"]
# bench/tools/step_profile.py under torchrun on WORLDS ranks (default "2 1"), for each of CONFIGS (default: the
# committed rows' ZeRO-1 and ZeRO-3 (bench/multigpu/rows/host2.jsonl), ZeRO-2 (conv1d2.jsonl) and that ZeRO-2 without
# the bf16 overflow check, in bench/estimator/dp_profile/), MODEL (default gpt2) at MICRO_BATCH (default 8), eager:
# the forward, backward and engine.step() phases synchronised apart, kernel time by kind (NCCL's as "collective") and
# GPU idle time, one row per rank in $OUT/profile.jsonl. Each config's batch size is set to micro-batch x ranks (a
# copy under $OUT). The host's Python speed (bench/estimator/host_probe.py) before and after, in
# $OUT/host_probe.jsonl. Each run capped at RUN_S (default 75) seconds while BUDGET_S (default 540) lasts.
set -uo pipefail
out=${1:?usage: bench/estimator/dp_profile.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-540}"
mkdir -p "$out/configs"
start_log "$out/profile.log"
here=bench/estimator/dp_profile
configs=${CONFIGS:-"$here/ds_zero1.json $here/ds_zero2.json $here/ds_zero2_nocheck.json $here/ds_zero3.json"}
model=${MODEL:-gpt2}
mb=${MICRO_BATCH:-8}
python3 bench/estimator/host_probe.py 2>>"$log" | tee -a "$out/host_probe.jsonl" >>"$log"
for config in $configs; do
  for world in ${WORLDS:-2 1}; do
    copy=$out/configs/$model-mb$mb-w$world-$(basename "$config")
    python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); mb, world = int(sys.argv[3]), int(sys.argv[4])
c["train_micro_batch_size_per_gpu"] = mb; c["train_batch_size"] = mb * world * c.get("gradient_accumulation_steps", 1)
json.dump(c, open(sys.argv[2], "w"))' "$config" "$copy" "$mb" "$world"
    run_by "${RUN_S:-75}" python3 -m torch.distributed.run --standalone --nproc_per_node "$world" \
      bench/tools/step_profile.py --model "$model" --vocab-pad 64 --micro-batch "$mb" --ds-config "$copy" \
      --only deepspeed --warmup 5 --steps 10 --profile-steps 3 --out "$out/profile.jsonl" </dev/null || true
  done
done
python3 bench/estimator/host_probe.py 2>>"$log" | tee -a "$out/host_probe.jsonl" >>"$log"
show_log
