#!/usr/bin/env bash
# The CPU side of the bucket-size study (issue 19, bench/buckets/README.md), from the repo root, in the project venv:
#     bash bench/buckets/cpu.sh OUT [STAGE]
# gpt2-tiny, micro-batch 8, 20 timed steps after 3, CPU ranks (gloo). Rows to OUT/runs.jsonl, the log to OUT/cpu.log.
#   zero12 (the default)  1 and 2 ranks: ZeRO-1 and ZeRO-2 with the buckets dsx writes (the model's 172,288
#                         parameters) and with DeepSpeed's 5e8 default (--ds-set), alternating
#   z3                    2 ranks, ZeRO-3: stage3_prefetch_bucket_size / stage3_param_persistence_threshold at
#                         DeepSpeed's defaults (5e7, 1e5: every gpt2-tiny tensor, at most 64,000 elements, stays
#                         whole on every rank), the prefetch sized to the model, the Trainer's "auto" rule
#                         (0.9 hidden^2 = 3,686, 10 hidden = 640), then persistence 0 (every tensor partitioned)
#                         and the defaults, alternating, three times each
set -uo pipefail
out=${1:?usage: bench/buckets/cpu.sh OUT [zero12|z3]}
stage=${2:-zero12}
mkdir -p "$out"
log=$out/cpu.log
{ date -u +"## %FT%TZ $(nproc) cores"; python -c "import torch, transformers, deepspeed as ds
print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', ds.__version__)"; } >>"$log" 2>&1
run() {  # run GPUS ZERO EXTRA...: one dsx run of gpt2-tiny, logged
  local gpus=$1 zero=$2
  shift 2
  cmd=(python -m dsx run --model gpt2-tiny --micro-batch 8 --steps 20 --warmup 3 --gpus "$gpus" --zero "$zero"
       --results "$out/runs.jsonl" "$@")
  echo "+ ${cmd[*]}" >>"$log"
  "${cmd[@]}" >>"$log" 2>&1
  echo "exit $?" >>"$log"
}
case $stage in
  zero12)
    default=(--ds-set zero_optimization.reduce_bucket_size=500000000
             --ds-set zero_optimization.allgather_bucket_size=500000000)
    for gpus in 1 2; do
      for zero in 1 2; do
        run "$gpus" "$zero"
        run "$gpus" "$zero" "${default[@]}"
      done
    done
    ;;
  z3)
    zero3() {  # zero3 PREFETCH PERSISTENCE
      echo --ds-set "zero_optimization.stage3_prefetch_bucket_size=$1" \
           --ds-set "zero_optimization.stage3_param_persistence_threshold=$2"
    }
    # shellcheck disable=SC2046  # zero3 prints four words
    {
      run 2 3 $(zero3 50000000 100000)
      run 2 3 $(zero3 172288 100000)
      run 2 3 $(zero3 3686 640)
      for _ in 1 2 3; do
        run 2 3 $(zero3 50000000 0)
        run 2 3 $(zero3 50000000 100000)
      done
    }
    ;;
  *) echo "bench/buckets/cpu.sh: unknown stage $stage (zero12, z3)" >&2; exit 2 ;;
esac
grep -E '^\+|step time' "$log"
