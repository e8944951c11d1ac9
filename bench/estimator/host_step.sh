#!/usr/bin/env bash
# DeepSpeed's optimizer step on GPT-2 124M, the H100 profile's exact command on another GPU kind, then with dsx's
# defaults (gradient clipping 1.0, the bf16 overflow check) at ZeRO-1 and ZeRO-2, then each of the two alone
# (bench/estimator/terms.md: is the step's host work the host's or the configuration's?). From the repo root:
#     bash bench/estimator/host_step.sh $OUT        # kind nvidia-h200 or nvidia-h100-x1, carry [".whl"]
# CONFIGS: space-separated ONLY:CONFIG_FILE entries to run instead (ONLY: both, deepspeed); MODEL (default gpt2) and
# MICRO_BATCH (default 32: each config's batch sizes are set to it, in a copy under $OUT) for another model.
# bench/tools/step_profile.py, compiled, vocabulary padded to 64 (bench/mfu/README.md's 124M profile): the forward,
# backward and engine.step() phases synchronised apart, kernel time from torch.profiler. Each run capped at RUN_S
# (default 150) seconds while BUDGET_S (default 560) lasts. Rows appended to $OUT/profile.jsonl.
set -uo pipefail
out=${1:?usage: bench/estimator/host_step.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-560}"
mkdir -p "$out"
start_log "$out/profile.log"
here=bench/estimator/host_step
# the H100's own command (bench/mfu/h100_tuned/profile_124m.log) with the plain-PyTorch step beside it, then the rest
configs=${CONFIGS:-"both:bench/mfu/h100_tuned/ds_zero1_lean.json deepspeed:$here/ds_zero1_defaults.json
deepspeed:$here/ds_zero2_defaults.json deepspeed:$here/ds_zero1_clip.json deepspeed:$here/ds_zero1_overflow_check.json"}
model=${MODEL:-gpt2}
mb=${MICRO_BATCH:-32}
for entry in $configs; do
  config=$out/$model-mb$mb-$(basename "${entry#*:}")
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))
c["train_batch_size"] = c["train_micro_batch_size_per_gpu"] = int(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))' \
    "${entry#*:}" "$config" "$mb"
  run_by "${RUN_S:-150}" python3 bench/tools/step_profile.py --model "$model" --vocab-pad 64 --micro-batch "$mb" \
    --compile --ds-config "$config" --only "${entry%%:*}" --out "$out/profile.jsonl" </dev/null || true
done
show_log
