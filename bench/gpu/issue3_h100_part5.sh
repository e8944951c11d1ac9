#!/usr/bin/env bash
# Issue 3 on one H100, part 5: GPT-2 1.56B (gpt2-xl shape), ZeRO-2 + engine.compile() at the largest micro-batch
# compile leaves room for (part 2 ran 8 at 42 GiB), with and without gradient accumulation (4 micro-batches per
# optimizer step amortise the 1.56B-parameter step), doing no work the model does not need: no gradient clipping,
# no bf16 overflow check. If micro-batch 16 does not fit, 12.
# Usage on the host:  bash bench/gpu/issue3_h100_part5.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100_part5.log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >"$log"
run() { echo "+ $*" >>"$log"; timeout "$1" "${@:2}" >>"$log" 2>&1; rc=$?; echo "exit $rc" >>"$log"; return $rc; }
xl=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --warmup 3 --gpus 1 --zero 2 --results "$res" --timeout 270 --tf32 --compile
    --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true
    --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false)
mb=16
run 280 python3 -m dsx run "${xl[@]}" --micro-batch $mb --steps 10 || { mb=12; run 280 python3 -m dsx run "${xl[@]}" --micro-batch $mb --steps 10; }
run 250 python3 -m dsx run "${xl[@]}" --micro-batch $mb --grad-accum 4 --steps 5
grep -E "^\+|^exit|step time|tokens/s|MFU" "$log" | tail -30
