#!/usr/bin/env bash
# The CPU rehearsal of bench/pipeline/h100.sh (the same comparison at a tiny size), from the repo root, in the project
# venv:
#     bash bench/pipeline/cpu.sh OUT
# gpt2-tiny, ZeRO-1, bf16, micro-batch 4 x 8 micro-batches, 10 timed steps after 3, one CPU rank: the plain engine and
# a 1-stage pipeline, alternating, twice each; then 2 pipeline stages on 2 CPU ranks. Rows: OUT/runs.jsonl, log:
# OUT/cpu.log ending with bench/pipeline/summary.py's tables.
set -uo pipefail
out=${1:?usage: bench/pipeline/cpu.sh OUT}
mkdir -p "$out"
log=$out/cpu.log
{ date -u +"## %FT%TZ $(nproc) cores"; python -c "import torch, transformers, deepspeed as ds
print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', ds.__version__)"; } >"$log" 2>&1
common=(--model gpt2-tiny --zero 1 --precision bf16 --micro-batch 4 --grad-accum 8 --steps 10 --warmup 3
        --results "$out/runs.jsonl")
step() {
  echo "+ python -m dsx run $*" >>"$log"
  python -m dsx run "$@" >>"$log" 2>&1
  echo "exit $?" >>"$log"
}
for _ in 1 2; do
  step "${common[@]}" --gpus 1
  step "${common[@]}" --gpus 1 --pipeline-stages 1
done
step "${common[@]}" --gpus 2 --pipeline-stages 2
python bench/pipeline/summary.py "$out/runs.jsonl" >>"$log" 2>&1
grep -E '^\+|^exit|^\||^speed' "$log"
