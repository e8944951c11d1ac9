#!/usr/bin/env bash
# Issue 3 on one H100, part 7: part 6's gpt2-xl run (ZeRO-2 + compile, micro-batch 16, dropout 0: 44.8% MFU at
# grad-accum 4) with 8 micro-batches per optimizer step (131k tokens, a quarter of GPT-2's own 512 x 1024 batch):
# the ~40 ms optimizer step is then shared by twice the tokens.
# Usage on the host:  bash bench/gpu/issue3_h100_part7.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100_part7.log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >"$log"
run() { echo "+ $*" >>"$log"; timeout "$1" "${@:2}" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
lean=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true
      --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false)
run 300 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --seq-len 1024 --warmup 2 --gpus 1 --zero 2 --results "$res" \
  --timeout 290 --tf32 --compile "${lean[@]}" --micro-batch 16 --grad-accum 8 --steps 5 \
  --set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0
grep -E "^\+|^exit|step time|tokens/s|MFU" "$log" | tail -20
