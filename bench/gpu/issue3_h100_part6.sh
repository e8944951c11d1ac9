#!/usr/bin/env bash
# Issue 3 on one H100, part 6: what stands between gpt2-xl ZeRO-2 + compile (part 5: 40.1% MFU at micro-batch 16,
# grad-accum 4) and 45%:
#   - the same run with GPT-2's dropout (0.1 on embeddings, residuals and attention) set to 0, as current
#     pretraining runs do: the FLOPs are the same, the masks and the dropout-in-attention kernels go;
#   - bench/step_profile.py on the part-5 configuration (engine only; micro-batch 16, no accumulation): forward,
#     backward and step times, and GPU kernel time by kind (how much of the step is matrix multiplication).
# Usage on the host:  bash bench/gpu/issue3_h100_part6.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100_part6.log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >"$log"
run() { echo "+ $*" >>"$log"; timeout "$1" "${@:2}" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
lean=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true
      --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false)
run 280 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --seq-len 1024 --warmup 3 --gpus 1 --zero 2 --results "$res" \
  --timeout 270 --tf32 --compile "${lean[@]}" --micro-batch 16 --grad-accum 4 --steps 5 \
  --set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0
python3 -m dsx config --zero 2 --micro-batch 16 --set optimizer.params.torch_adam=true --set optimizer.params.fused=true \
  --set gradient_clipping=0 --set bf16.check_grad_overflow=false -o "$out/ds_zero2_lean.json" >>"$log" 2>&1
run 250 python3 bench/step_profile.py --model gpt2-xl --vocab-pad 64 --micro-batch 16 --compile --only deepspeed \
  --ds-config "$out/ds_zero2_lean.json" --warmup 3 --steps 5 --profile-steps 2 --out "$out/profile_xl.jsonl"
grep -E "^\+|^exit|step time|tokens/s|MFU" "$log" | tail -20
cut -c1-2500 "$out/profile_xl.jsonl"
