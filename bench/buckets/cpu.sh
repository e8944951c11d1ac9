#!/usr/bin/env bash
# The CPU side of the bucket-size study (issue 19, bench/buckets/README.md), from the repo root, in the project venv:
#     bash bench/buckets/cpu.sh OUT
# gpt2-tiny, micro-batch 8, 20 timed steps after 3, CPU ranks (gloo), 1 and 2 ranks: ZeRO-1 and ZeRO-2 with the
# buckets dsx now writes (the model's 172,288 parameters) and with DeepSpeed's 5e8 default (--ds-set), alternating.
set -uo pipefail
out=${1:?usage: bench/buckets/cpu.sh OUT}
mkdir -p "$out"
log=$out/cpu.log
{ date -u +"## %FT%TZ $(nproc) cores"; python -c "import torch, transformers, deepspeed as ds
print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', ds.__version__)"; } >"$log" 2>&1
default=(--ds-set zero_optimization.reduce_bucket_size=500000000 --ds-set zero_optimization.allgather_bucket_size=500000000)
for gpus in 1 2; do
  for zero in 1 2; do
    for buckets in sized default; do
      extra=()
      [ $buckets = default ] && extra=("${default[@]}")
      cmd=(python -m dsx run --model gpt2-tiny --micro-batch 8 --steps 20 --warmup 3 --gpus "$gpus" --zero "$zero"
           --results "$out/runs.jsonl" "${extra[@]}")
      echo "+ ${cmd[*]}" >>"$log"
      "${cmd[@]}" >>"$log" 2>&1
      echo "exit $?" >>"$log"
    done
  done
done
grep -E '^\+|step time' "$log"
