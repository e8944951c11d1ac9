#!/usr/bin/env bash
# What holds the GPU's memory at the peak of a long-context step, against `dsx estimate`'s parts (issue 32: llama-8b
# at 524,288 tokens on 4 GPUs, Ulysses 4, measured 37.6 GiB, predicted 52.7; llama-1b at 262,144 tokens with the
# same savers on one GPU measured 39.5, predicted 33.5). From the repo root, the wheelhouse carried in .whl, on 2 GPUs:
#     bash bench/tools/memory_peak.sh $OUT          (~6 min; kind nvidia-h200-x2)
# Runs, each with DSX_MEMORY_HISTORY (dsx/rank/memory_history.py), 1 step, no warm-up (as the 524k row ran), bf16,
# torch's fused AdamW, the learnable synthetic data, --no-comm-log, expandable segments:
#   sp2   llama-8b's layers, hidden, heads and vocabulary with 4 of its 32 layers (every activation part the same per
#         rank as the 524k row: 131,072 tokens a rank), 262,144 tokens, Ulysses 2 on 2 GPUs, ZeRO-3, checkpointing,
#         --loss tiled, --act-ckpt-offload, --tiled-mlp (the 524k row's flags)
#   one8b the same model at 131,072 tokens on 1 GPU (no Ulysses: what the all-to-alls add)
#   one1b llama-1b at 131,072 tokens on 1 GPU, ZeRO-2, the same savers (the 262k row's flags at half the length)
# Then bench/tools/memory_peak.py on each rank-0 history: $OUT/memory_peak/RUN.md (+ .json), rows in RUN.jsonl, the
# log in $OUT/memory_peak/memory_peak.log.
set -uo pipefail
out=${1:?usage: bench/tools/memory_peak.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
dir=$out/memory_peak
mkdir -p "$dir"
set_deadline "${DEADLINE_S:-560}"
start_log "$dir/memory_peak.log"
savers=(--zero 3 --precision bf16 --micro-batch 1 --act-ckpt --loss tiled --act-ckpt-offload --tiled-mlp
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true --steps 1 --warmup 0 --no-comm-log)
eight=(--model llama-8b --set num_hidden_layers=4)
declare -A runs=(
  [sp2]="${eight[*]} --gpus 2 --sequence-parallel 2 --seq-len 262144 --set max_position_embeddings=262144"
  [one8b]="${eight[*]} --gpus 1 --seq-len 131072 --set max_position_embeddings=131072"
  [one1b]="--model llama-1b --gpus 1 --seq-len 131072 --set max_position_embeddings=131072 --zero 2"
)
for name in sp2 one8b one1b; do
  rm -rf "$dir/$name.hist"
  # shellcheck disable=SC2086  # the run's flags are words
  run_by 170 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True DSX_MEMORY_HISTORY="$dir/$name.hist" \
    python3 -m dsx run "${savers[@]}" ${runs[$name]} --results "$dir/$name.jsonl" </dev/null
  if [ -s "$dir/$name.hist/rank0.pickle" ]; then
    run_by 90 python3 bench/tools/memory_peak.py "$dir/$name.hist/rank0.pickle" --row "$dir/$name.jsonl" \
      --out "$dir/$name.md"
  fi
  rm -rf "$dir/$name.hist"  # hundreds of MB: the report is what comes back
done
show_log
