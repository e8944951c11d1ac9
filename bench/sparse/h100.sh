#!/usr/bin/env bash
# Sparse attention at long sequences (issue 14, bench/sparse/README.md) on one H100 (kind nvidia-h100-x1), from the
# repo root, with the wheelhouse carried in .whl:
#     bash bench/sparse/h100.sh $OUT [BUDGET_S]
# Every point is one `dsx run`: bf16, micro-batch 1, ZeRO-2, torch's fused AdamW (no JIT build), 2 warm-up + 3 timed
# steps, activation checkpointing from 16k tokens on; attention dropout 0 in every run (FlexAttention has none, and
# dense and sparse must train the same model). Attention is dense SDPA (flash), or dsx's sparse attention with
# DeepSpeed's bigbird or fixed layout in 128-token blocks (all else the config parser's defaults), compiled
# FlexAttention. The points run in the order of bench/sparse/plan.txt (the target - 32k - first), each only while
# BUDGET_S seconds (default 450) are not spent, so a cut command still leaves the most important rows: they are
# appended to $OUT/runs.jsonl as each run ends; the log is $OUT/h100.log, the table $OUT/summary.md.
# PLAN=FILE runs another plan (lines: MODEL SEQ MODE[+compile] [EXPECTED_S [NAME=VALUE ...] [FLAG ...]], the NAME=VALUE
# words set in that point's environment, the flags added to its `dsx run` after the common ones; tests run a tiny
# one on CPU ranks);
# STEPS and WARMUP set the timed and warm-up steps of every point (default 3 and 2); CKPT_FROM the sequence length
# from which activation checkpointing is on (default 16384).
set -uo pipefail
out=${1:?usage: bench/sparse/h100.sh OUT [BUDGET_S]}
budget=${2:-450}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
res=$out/runs.jsonl
start_log "$out/h100.log"
common=(--gpus 1 --zero 2 --precision bf16 --micro-batch 1 --steps "${STEPS:-3}" --warmup "${WARMUP:-2}"
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true --results "$res")

model_args() {  # model_args MODEL SEQ: the model flags of one point
  case $1 in
    gpt2-medium) echo --model gpt2-medium --vocab-pad 64 --set attn_pdrop=0 --set "n_positions=$2" ;;
    llama-1b) echo --model llama-1b --set num_hidden_layers=4 ;;  # 4 of its 16 layers: the 32k point fits the time
    gpt2-tiny) echo --model gpt2-tiny --set attn_pdrop=0 ;;
    *) echo --model "$1" ;;
  esac
}

mode_args() {  # mode_args MODE[+compile]: the attention flags of one point (+compile: the whole model compiled)
  case ${1%+compile} in
    dense) ;;
    auto) echo --sparse-attention auto:bigbird --sparse-set block=128 ;;
    *) echo --sparse-attention "${1%+compile}" --sparse-set "block=${BLOCK:-128}" ;;
  esac
  [ "${1%+compile}" = "$1" ] || echo --compile
}

started=$SECONDS
while read -r model seq mode expected extra; do
  [ -z "$model" ] || [ "${model:0:1}" = "#" ] && continue
  expected=${expected:-90}
  if (( SECONDS - started + expected > budget )); then
    echo "skip $model $seq $mode: ${expected} s expected, $(( budget - (SECONDS - started) )) s of the budget left" \
      >>"$log"
    continue
  fi
  ckpt=() envs=() flags=()
  (( seq >= ${CKPT_FROM:-16384} )) && ckpt=(--act-ckpt)
  for word in ${extra:-}; do
    if [[ $word =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$word"); else flags+=("$word"); fi
  done
  # shellcheck disable=SC2046  # model_args and mode_args print flags
  run $(( expected * 3 )) env "${envs[@]}" python3 -m dsx run "${common[@]}" $(model_args "$model" "$seq") \
    --seq-len "$seq" "${ckpt[@]}" $(mode_args "$mode") "${flags[@]}" </dev/null
done < "${PLAN:-bench/sparse/plan.txt}"
python3 bench/sparse/summary.py "$res" >"$out/summary.md" 2>>"$log"
cat "$out/summary.md" >>"$log"
show_log
