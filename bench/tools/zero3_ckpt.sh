#!/usr/bin/env bash
# Why activation checkpointing costs more under ZeRO-3 than dsx's estimator prices it (issue 30: llama-1b ZeRO-3 +
# checkpointing on one GPU 1.50 s a step against 0.91 without, bench/multigpu/rows/z3-1b*.jsonl), on one GPU, from
# the repo root, with the wheelhouse carried in .whl:
#     bash bench/tools/zero3_ckpt.sh $OUT          (~5 min)
# bench/tools/step_profile.py, the DeepSpeed engine step only, llama-1b, micro-batch 4, 1,024 tokens, bf16, torch's
# fused AdamW, clipping 1.0, uncompiled: ZeRO-3 without and with checkpointing, then ZeRO-2 the same (the control:
# what checkpointing costs without ZeRO-3's parameter hooks). Phases, kernels by kind, GPU idle per step.
# One JSON line per setup in $OUT/zero3_ckpt.jsonl; the log is $OUT/zero3_ckpt.log.
set -uo pipefail
out=${1:?usage: bench/tools/zero3_ckpt.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
mkdir -p "$out"
set_deadline "${DEADLINE_S:-560}"
start_log "$out/zero3_ckpt.log"
for stage in 3 2; do
  config=$(mktemp --suffix .json)
  cat >"$config" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true, "fused": true}},
 "zero_optimization": {"stage": $stage}}
JSON
  for ckpt in "" --act-ckpt; do
    # shellcheck disable=SC2086  # the flag is a word or nothing
    run_by 150 python3 bench/tools/step_profile.py --only deepspeed --model llama-1b --micro-batch 4 --seq-len 1024 \
      --ds-config "$config" --warmup 3 --steps 5 --profile-steps 2 $ckpt --out "$out/zero3_ckpt.jsonl"
  done
done
show_log
