#!/usr/bin/env bash
# Where the ladder's steps go (bench/estimator/terms.md, issue 30 item 5): bench/tools/step_profile.py on each row
# of a ladder.sh results file with grad-accum 1, the row's own model, micro-batch and DeepSpeed config, from the
# repo root:
#     bash bench/estimator/profile_ladder.sh $OUT ROWS.jsonl     # kind nvidia-h200 or nvidia-h100-x1, carry [".whl"]
# The DeepSpeed engine's step only (ONLY=both: the plain-PyTorch step beside it), 5 timed and 3 profiled steps after
# 3, each capped at RUN_S (default 90) seconds while BUDGET_S (default 560) lasts. Rows in $OUT/profile.jsonl: the
# forward, backward and optimizer-step phases synchronised apart, GPU kernel time by kind and GPU idle time.
set -uo pipefail
out=${1:?usage: bench/estimator/profile_ladder.sh OUT ROWS.jsonl}
rows=${2:?usage: bench/estimator/profile_ladder.sh OUT ROWS.jsonl}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-560}"
mkdir -p "$out/configs"
start_log "$out/profile.log"
# one line per row to profile: MODEL VOCAB_PAD MICRO_BATCH CONFIG_FILE (each row's ds_config written beside it)
plan=$(python3 - "$rows" "$out/configs" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    config = row["ds_config"]
    if row["status"] != "ok" or row["grad_accum"] != 1 or config.get("gradient_clipping", 1.0) == 0:
        continue
    path = f"{sys.argv[2]}/{row['run_id']}.json"
    json.dump(config, open(path, "w"))
    print(row["model"]["preset"], row["model"].get("vocab_pad") or 1, row["micro_batch"], path)
EOF
)
while read -r model pad mb config; do
  [ -n "$model" ] || continue
  run_by "${RUN_S:-90}" python3 bench/tools/step_profile.py --model "$model" --vocab-pad "$pad" --micro-batch "$mb" \
    --ds-config "$config" --only "${ONLY:-deepspeed}" --warmup 3 --steps 5 --profile-steps 3 \
    --out "$out/profile.jsonl" </dev/null || true
done <<<"$plan"
show_log
