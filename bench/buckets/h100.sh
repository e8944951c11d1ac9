#!/usr/bin/env bash
# The bucket-size study (issue 19, bench/buckets/README.md) on one GPU (kind nvidia-h100-x1), from the repo root, with
# the wheelhouse carried in .whl:
#     bash bench/buckets/h100.sh $OUT STAGE...
# Every run is `dsx run` with ZeRO's reduce_bucket_size and allgather_bucket_size set to one value (--ds-set), all
# else dsx's defaults plus torch's fused AdamW (no JIT build); rows go to $OUT/runs.jsonl, the log to $OUT/h100.log.
#   gpt2  GPT-2 124M, micro-batch 16: ZeRO-2 at 5e8 (DeepSpeed's default), 2e8, 5e7, 1e7, 589824 (hidden^2, the
#         Trainer's "auto" rule) and 1e9, then 5e8 again (drift); ZeRO-1 at 5e8 and 5e7
#   xl    gpt2-xl, micro-batch 8: ZeRO-2 at 5e8, 1e8, 1e9
#   now   gpt2, micro-batch 16, ZeRO-2: the buckets dsx writes since issue 19 (min(5e8, 124M parameters)) against 5e8,
#         alternating, twice each
#   z3    ZeRO-3's prefetch bucket and parameter persistence threshold (rows to $OUT/z3.jsonl): gpt2-xl micro-batch 8,
#         12 timed steps after 3, at DeepSpeed's defaults (5e7, 1e5), the Trainer's "auto" rule (0.9 hidden^2,
#         10 hidden), prefetch 2e8, persistence 1e7, the defaults again (drift); gpt2 micro-batch 16 at the
#         defaults, the "auto" rule and prefetch 2e8 (the first attempt ran out of its 10 minutes in gpt2's second run)
#   z3b   the ZeRO-3 study's second command (rows to $OUT/z3.jsonl): gpt2-xl at prefetch 2e8, 5e7 (the default), 5e8;
#         gpt2 at 5e7 and 2e8; the persistence threshold left at DeepSpeed's default
set -uo pipefail
usage="usage: bench/buckets/h100.sh OUT STAGE... (stages: gpt2 xl now z3 z3b)"
out=${1:?$usage}
shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
res=$out/runs.jsonl
start_log "$out/h100.log"

buckets() {  # buckets SIZE: the two ZeRO bucket keys at SIZE elements
  echo --ds-set "zero_optimization.reduce_bucket_size=$1" --ds-set "zero_optimization.allgather_bucket_size=$1"
}

for stage in "$@"; do
  case $stage in
    gpt2)
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --micro-batch 16 --steps 15 --warmup 5 --gpus 1
            --results "$res" "${adam[@]}")
      for size in 500000000 200000000 50000000 10000000 589824 1000000000 500000000; do
        # shellcheck disable=SC2046  # buckets prints four words
        run 150 python3 -m dsx run "${gpt2[@]}" --zero 2 $(buckets $size)
      done
      for size in 500000000 50000000; do
        # shellcheck disable=SC2046
        run 150 python3 -m dsx run "${gpt2[@]}" --zero 1 $(buckets $size)
      done
      ;;
    xl)
      xl=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --micro-batch 8 --steps 8 --warmup 3 --gpus 1
          --results "$res" "${adam[@]}")
      for size in 500000000 100000000 1000000000; do
        # shellcheck disable=SC2046
        run 200 python3 -m dsx run "${xl[@]}" --zero 2 $(buckets $size)
      done
      ;;
    now)
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --micro-batch 16 --steps 15 --warmup 5 --gpus 1
            --results "$res" "${adam[@]}" --zero 2)
      for _ in 1 2; do
        run 150 python3 -m dsx run "${gpt2[@]}"
        # shellcheck disable=SC2046
        run 150 python3 -m dsx run "${gpt2[@]}" $(buckets 500000000)
      done
      ;;
    z3)
      z3=(--zero 3 --vocab-pad 64 --seq-len 1024 --gpus 1 --results "$out/z3.jsonl" "${adam[@]}")
      xl=(--model gpt2-xl --micro-batch 8 --steps 12 --warmup 3 "${z3[@]}")
      small=(--model gpt2 --micro-batch 16 --steps 15 --warmup 5 "${z3[@]}")
      # zero3 PREFETCH PERSISTENCE: the two ZeRO-3 keys, explicit (DeepSpeed's defaults too: the row says them)
      zero3() {
        echo --ds-set "zero_optimization.stage3_prefetch_bucket_size=$1" \
             --ds-set "zero_optimization.stage3_param_persistence_threshold=$2"
      }
      # shellcheck disable=SC2046  # zero3 prints four words
      {
        run 150 python3 -m dsx run "${xl[@]}" $(zero3 50000000 100000)
        run 150 python3 -m dsx run "${xl[@]}" $(zero3 2304000 16000)
        run 150 python3 -m dsx run "${xl[@]}" $(zero3 200000000 100000)
        run 150 python3 -m dsx run "${xl[@]}" $(zero3 50000000 10000000)
        run 150 python3 -m dsx run "${xl[@]}" $(zero3 50000000 100000)
        run 100 python3 -m dsx run "${small[@]}" $(zero3 50000000 100000)
        run 100 python3 -m dsx run "${small[@]}" $(zero3 530841 7680)
        run 100 python3 -m dsx run "${small[@]}" $(zero3 200000000 100000)
      }
      ;;
    z3b)
      z3=(--zero 3 --vocab-pad 64 --seq-len 1024 --gpus 1 --results "$out/z3.jsonl" "${adam[@]}")
      xl=(--model gpt2-xl --micro-batch 8 --steps 12 --warmup 3 "${z3[@]}")
      small=(--model gpt2 --micro-batch 16 --steps 15 --warmup 5 "${z3[@]}")
      prefetch=zero_optimization.stage3_prefetch_bucket_size
      for size in 200000000 50000000 500000000; do
        run 110 python3 -m dsx run "${xl[@]}" --ds-set "$prefetch=$size"
      done
      for size in 50000000 200000000; do
        run 85 python3 -m dsx run "${small[@]}" --ds-set "$prefetch=$size"
      done
      ;;
    *) echo "bench/buckets/h100.sh: unknown stage $stage ($usage)" >&2; exit 2 ;;
  esac
done
show_log
