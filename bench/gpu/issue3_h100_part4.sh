#!/usr/bin/env bash
# Issue 3 on one H100, part 4: GPT-2 124M (seq 1024) against the compiled plain-PyTorch baseline, in one command.
#   - the baseline at micro-batch 32 (as in part 1) and 64;
#   - dsx run doing the baseline's work and no more: ZeRO-1 or ZeRO-0, bf16, engine.compile(), torch's fused AdamW,
#     no gradient clipping and no bf16 overflow check (DeepSpeed 0.19's default checks; the baseline does neither);
#   - bench/step_profile.py: where each step's time goes, baseline vs DeepSpeed engine, same model and batch.
# Usage on the host:  bash bench/gpu/issue3_h100_part4.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100_part4.log
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
} >"$log" 2>&1
run() { echo "+ $*" >>"$log"; timeout "$1" "${@:2}" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
lean=(--tf32 --compile --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true
      --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false)
gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --gpus 1 --results "$res" --timeout 110 "${lean[@]}")
run 90 python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 32 --compile --out "$out/baseline.jsonl"
run 120 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 32
run 120 python3 -m dsx run "${gpt2[@]}" --zero 0 --micro-batch 32
run 90 python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 64 --compile --out "$out/baseline.jsonl"
run 120 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 64
python3 -m dsx config --zero 1 --micro-batch 32 --set optimizer.params.torch_adam=true --set optimizer.params.fused=true \
  --set gradient_clipping=0 --set bf16.check_grad_overflow=false -o "$out/ds_zero1_lean.json" >>"$log" 2>&1
run 150 python3 bench/step_profile.py --model gpt2 --vocab-pad 64 --micro-batch 32 --compile \
  --ds-config "$out/ds_zero1_lean.json" --out "$out/profile.jsonl"
grep -E "^\+|^exit|step time|tokens/s" "$log" | tail -40
cat "$out"/baseline.jsonl "$out"/profile.jsonl | cut -c1-600
