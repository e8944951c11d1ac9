#!/usr/bin/env bash
# Real clients on one GPU (issue 17; kind nvidia-h100-x1), from the repo root, with the wheelhouse carried in .whl:
#     bash bench/clients/h100.sh $OUT
# A transformers Trainer script (tests/fixtures/scripts/train_hf.py: a gpt2-xl shape built from its config, random
# tokens of 1024, bf16) through `dsx launch`, each launch a row in $OUT/runs.jsonl (log: $OUT/h100.log, the Trainer's
# output dirs under $OUT/trainer/):
#   0. the transformers docs' ZeRO-2 "auto" config without --warmup_steps: dsx launch refuses it (the host's
#      transformers 5.17 fills warmup_num_steps 0, which DeepSpeed 0.19.8 rejects), in seconds, nothing started
#   1. the same config with --warmup_steps: the stock setup a newcomer pastes (CPU optimizer offload, the Trainer's
#      default micro-batch 8)
#   2. `dsx report --best` of the committed gpt2-xl sweep (bench/sweep/h100/gpt2xl.jsonl) pasted as --deepspeed,
#      with the Trainer arguments its values mean (micro-batch, bf16, lr, clipping) and --gradient_checkpointing
#      (the best row trained with activation checkpointing, which lives in the model, not in the DeepSpeed JSON);
#      if it fails (the best row peaked at 76.5 GiB), the runner-up within its noise (micro-batch 32) is run too
# Then `dsx report $OUT/runs.jsonl --all`: the Trainer's own samples/s and tokens/s, stock beside dsx's.
# Expected: ~5-7 min (JIT builds of FusedAdam + CPUAdam ~70 s in parallel, two gpt2-xl inits ~40 s each, 30 + 20
# steps).
set -uo pipefail
out=${1:?usage: bench/clients/h100.sh OUT}
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
res=$out/runs.jsonl
start_log "$out/h100.log"
build_ops FusedAdamBuilder CPUAdamBuilder
echo "ops built" >>"$log"

script=tests/fixtures/scripts/train_hf.py
stock=tests/fixtures/configs/hf_trainer_zero2_auto.json
common=(--preset gpt2-xl --seq_len 1024 --bf16 --report_to none --save_strategy no --logging_steps 10 --seed 0)
launch=(python3 -m dsx launch --gpus 1 --seq-len 1024 --results "$res" --config-arg --deepspeed)

# 0. refused before anything starts: no warmup asked, transformers < 5.18 would fill 0
run 120 "${launch[@]}" --config "$stock" -- python3 "$script" "${common[@]}" --output_dir "$out/trainer/refused" \
  --max_steps 30
# 1. the docs' ZeRO-2 config as a newcomer runs it
run 300 "${launch[@]}" --config "$stock" -- python3 "$script" "${common[@]}" --output_dir "$out/trainer/stock" \
  --max_steps 30 --warmup_steps 3 --num_samples 240 --per_device_train_batch_size 8

# 2. dsx's pick from the committed gpt2-xl sweep, with the Trainer arguments that match its values
trainer_args() {  # trainer_args CONFIG: the TrainingArguments a concrete dsx config's values need
  python3 - "$1" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
mb, ga = c["train_micro_batch_size_per_gpu"], c.get("gradient_accumulation_steps", 1)
print(f"--per_device_train_batch_size {mb} --gradient_accumulation_steps {ga} --num_samples {mb * ga * 20} "
      f"--learning_rate {c['optimizer']['params']['lr']} --max_grad_norm {c.get('gradient_clipping', 1.0)}")
EOF
}
dsx_config() {  # dsx_config NAME [--where ...]: dsx report --best of the sweep rows -> $out/NAME.json
  run 120 python3 -m dsx report bench/sweep/h100/gpt2xl.jsonl --best -o "$out/$1.json" "${@:2}"
}
dsx_config dsx_best
# shellcheck disable=SC2046  # trainer_args prints the flags
if ! run 400 "${launch[@]}" --config "$out/dsx_best.json" -- python3 "$script" "${common[@]}" \
    --output_dir "$out/trainer/dsx_best" --max_steps 20 --warmup_steps 3 --gradient_checkpointing \
    $(trainer_args "$out/dsx_best.json"); then
  dsx_config dsx_mb32 --where "label=z3 bf16 ckpt,micro_batch=32"
  # shellcheck disable=SC2046
  run 300 "${launch[@]}" --config "$out/dsx_mb32.json" -- python3 "$script" "${common[@]}" \
    --output_dir "$out/trainer/dsx_mb32" --max_steps 20 --warmup_steps 3 --gradient_checkpointing \
    $(trainer_args "$out/dsx_mb32.json")
fi
run 60 python3 -m dsx report "$res" --all --format markdown
show_log
grep -E "Trainer's own figures|^\| " "$log" | tail -n 20
