#!/usr/bin/env bash
# Issue 3 evidence on one H100, part 2 (part 1's BERT run hit the 60 s shell timeout before its first step):
#   BERT-base seq 512 at two large micro-batches, and gpt2-xl ZeRO-2 with engine.compile().
# Usage on the host:  bash bench/gpu/issue3_h100_part2.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100_part2.log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" >"$log"
adam=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
run() { echo "+ $*" >>"$log"; timeout "$1" "${@:2}" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
bert=(--model bert-base --seq-len 512 --steps 20 --warmup 5 --gpus 1 --zero 1 --results "$res" --timeout 170)
run 180 python3 -m dsx run "${bert[@]}" --micro-batch 128 "${adam[@]}"
run 180 python3 -m dsx run "${bert[@]}" --micro-batch 192 "${adam[@]}"
run 230 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --seq-len 1024 --steps 10 --warmup 3 --gpus 1 --zero 2 \
  --micro-batch 8 --compile "${adam[@]}" --results "$res" --timeout 220
tail -c 3000 "$log"
