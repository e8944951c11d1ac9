#!/usr/bin/env bash
# Issue 3 evidence on one H100, part 3: push BERT-base and ALBERT-base (seq 512, bf16, ZeRO-1) to the largest
# micro-batch that fits (part 2 stopped at BERT 192 / ALBERT 128, both with memory to spare). An OOM is a row too.
# Usage on the host:  bash bench/gpu/issue3_h100_part3.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100_part3.log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >"$log"
adam=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
run() { echo "+ $*" >>"$log"; timeout 120 "$@" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
for mb in 256 320; do
  run python3 -m dsx run --model bert-base --seq-len 512 --micro-batch $mb --steps 10 --warmup 3 --gpus 1 --zero 1 "${adam[@]}" --results "$res" --timeout 110
done
for mb in 192 256; do
  run python3 -m dsx run --model albert-base --seq-len 512 --micro-batch $mb --steps 10 --warmup 3 --gpus 1 --zero 1 "${adam[@]}" --results "$res" --timeout 110
done
grep -E "^\+|^exit|^OK|^dsx run:|step time|memory max" "$log"
