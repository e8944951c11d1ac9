#!/usr/bin/env bash
# Compiled models with dsx's plain causal mask against transformers' own masks (dsx.models.assume_unpacked_batches),
# on one H100 (kind nvidia-h100-x1), from the repo root, with the wheelhouse carried in .whl:
#     bash bench/tools/compiled_masks.sh $OUT          (~8 min with the host's start)
# bench/tools/step_profile.py, the DeepSpeed engine step only, engine.compile(), bf16, ZeRO-2, torch's fused AdamW:
# 1. gpt2-xl, micro-batch 16, 1,024 tokens, no clipping or overflow check, no dropout (bench/mfu's 45% MFU setup):
#    with dsx's masks, then with transformers' (--transformers-masks), in one process each;
# 2. gpt2-medium at 32,768 tokens, micro-batch 1, attention dropout 0: dense SDPA and bigbird (128-token blocks), where
#    a compiled step's time goes now that neither builds the full mask (issue 14, bench/sparse/README.md).
# ONLY=long runs part 2 alone, with TORCH_LOGS=graph_breaks (the log then lists every graph break of the compiled
# step: none since FlexAttention joins the model's graph, issue 32).
# One JSON line per setup in $OUT/compiled_masks.jsonl; the log is $OUT/compiled_masks.log.
set -uo pipefail
out=${1:?usage: bench/tools/compiled_masks.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
mkdir -p "$out"
start_log "$out/compiled_masks.log"
res=$out/compiled_masks.jsonl
lean=$(mktemp --suffix .json)  # not under $OUT: a device command brings back 8 files at most
cat >"$lean" <<'JSON'
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "gradient_clipping": 0,
 "bf16": {"enabled": true, "check_grad_overflow": false},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true, "fused": true}},
 "zero_optimization": {"stage": 2}}
JSON
long=$(mktemp --suffix .json)
cat >"$long" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true, "fused": true}},
 "zero_optimization": {"stage": 2}}
JSON
xl=(--only deepspeed --model gpt2-xl --vocab-pad 64 --micro-batch 16 --compile --ds-config "$lean" --warmup 5
    --steps 10 --profile-steps 3 --set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0 --out "$res")
if [ "${ONLY:-}" != long ]; then
  run 200 python3 bench/tools/step_profile.py "${xl[@]}"
  run 200 python3 bench/tools/step_profile.py "${xl[@]}" --transformers-masks
fi
[ "${ONLY:-}" = long ] && export TORCH_LOGS=graph_breaks
for sparse in "" "--sparse bigbird"; do
  # shellcheck disable=SC2086  # the flags are words
  run 150 python3 bench/tools/step_profile.py --only deepspeed --model gpt2-medium --vocab-pad 64 --seq-len 32768 \
    --set attn_pdrop=0 --set n_positions=32768 --micro-batch 1 --compile --ds-config "$long" --warmup 3 --steps 5 \
    --profile-steps 2 $sparse --out "$res"
done
show_log
