#!/usr/bin/env bash
# Why bigbird's 32k step is "only" ~2x dense end to end (issue 14, bench/sparse/README.md), on one H100 (kind
# nvidia-h100-x1), from the repo root, with the wheelhouse carried in .whl:
#     bash bench/sparse/profile.sh $OUT [SEQ]          (SEQ default 32768; ~5 min with the host's start)
# 1. bench/sparse/kernel.py --mode fixed: the fixed layout's attention call alone against dense SDPA (the probe
#    `auto`'s predictor had only for bigbird) -> $OUT/kernel_fixed.txt (a JSON line per length, then a table)
# 2. bench/tools/step_profile.py: one gpt2-medium step at SEQ tokens as bench/sparse/h100.sh trains it (bf16, ZeRO-2,
#    torch's fused AdamW, micro-batch 1, attention dropout 0), dense SDPA and bigbird, with and without activation
#    checkpointing: the step split into forward / backward / optimizer and GPU kernel time by kind (attention,
#    matmul, the rest) -> $OUT/profile.jsonl
# The log is $OUT/profile.log.
set -uo pipefail
out=${1:?usage: bench/sparse/profile.sh OUT [SEQ]}
seq=${2:-32768}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
mkdir -p "$out"
start_log "$out/profile.log"
run 200 python3 bench/sparse/kernel.py --mode fixed 4096 8192 16384 32768 65536
sed -n '/kernel.py --mode fixed/,/^exit/p' "$log" | grep -E '^[{|]' >"$out/kernel_fixed.txt"  # its lines, from the log
ds_config=$(mktemp --suffix .json)  # not under $OUT: a device command brings back 8 files at most
cat >"$ds_config" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true, "fused": true}},
 "zero_optimization": {"stage": 2}}
JSON
for ckpt in --act-ckpt ""; do
  for sparse in "" "--sparse bigbird"; do
    # shellcheck disable=SC2086  # the flags are words
    run 150 python3 bench/tools/step_profile.py --only deepspeed --model gpt2-medium --vocab-pad 64 --seq-len "$seq" \
      --set attn_pdrop=0 --set "n_positions=$seq" --micro-batch 1 --ds-config "$ds_config" --warmup 2 \
      --steps 3 --profile-steps 2 $ckpt $sparse --out "$out/profile.jsonl"
  done
done
show_log
