#!/usr/bin/env bash
# The kernel ladder on one H100 (issue 33, bench/kernels/README.md), from the repo root, the wheelhouse in .whl with
# liger-kernel 0.8.5 and torchao 0.18.0 beside dsx's wheels (bench/gpu/wheelhouse.sh, then pip download them):
#     bash bench/kernels/h100.sh $OUT [MODEL [SEQ [MICRO_BATCH]]]     # kind nvidia-h100-x1, carry [".whl"]
# One command, each rung against the configuration without it, alternating while BUDGET_S (default 540) lasts:
# ROUNDS (default 3) rounds of RUNGS (default "base liger fp8"): base, --kernels liger, --fp8 tensorwise, base, ...
# A rung is base, liger, fp8 (tensorwise), fp8-rowwise, liger+fp8 or fused (--loss fused: Liger's loss alone), with
# @MB for its own micro-batch (liger@16: Liger's fused loss frees the logits, so it fits twice base's micro-batch; the
# sweep would take it).
# ZeRO-1, bf16, torch's fused AdamW, eager (COMPILE=1: every rung with --compile, as float8 needs to be fast), 5 timed
# steps after 2, the learnable synthetic data; each run capped at RUN_S seconds (default 150; a cold float8 compile
# needs more); rows in $OUT/kernels.jsonl.
set -uo pipefail
out=${1:?usage: bench/kernels/h100.sh OUT [MODEL [SEQ [MICRO_BATCH]]]}
model=${2:-llama-1b} seq=${3:-2048} mb=${4:-8}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-540}"
mkdir -p "$out"
res=$out/kernels.jsonl
start_log "$out/kernels.log"
common=(--model "$model" --seq-len "$seq" --gpus 1 --zero 1 --precision bf16 --micro-batch "$mb" --steps 5 --warmup 2
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true --results "$res")
[ "${COMPILE:-0}" = 1 ] && common+=(--compile)
for round in $(seq "${ROUNDS:-3}"); do
  for rung in ${RUNGS:-base liger fp8}; do
    name=${rung%@*} rung_mb=()
    [ "$name" != "$rung" ] && rung_mb=(--micro-batch "${rung#*@}")
    case $name in
      base) extra=() ;;
      liger) extra=(--kernels liger) ;;
      fp8) extra=(--fp8 tensorwise) ;;
      fp8-rowwise) extra=(--fp8 rowwise) ;;
      liger+fp8) extra=(--kernels liger --fp8 tensorwise) ;;
      fused) extra=(--loss fused) ;;
      *) echo "bench/kernels/h100.sh: unknown rung '$rung' (base, liger, fp8, fp8-rowwise, liger+fp8, fused," \
           "each @MB)" >&2
         exit 2 ;;
    esac
    echo "round $round: $rung" >>"$log"
    run_by "${RUN_S:-150}" python3 -m dsx run "${common[@]}" "${extra[@]}" "${rung_mb[@]}" </dev/null || true
  done
done
[ -s "$res" ] && python3 -m dsx report "$res" --format markdown >>"$log" 2>&1
show_log
