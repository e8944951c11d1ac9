#!/usr/bin/env bash
# What holds the GPU's memory at the peak of a long-context step, against `dsx estimate`'s parts (issue 32: llama-8b
# at 524,288 tokens on 4 GPUs, Ulysses 4, measured 37.6 GiB, predicted 52.7, in a run of one step; llama-1b at
# 262,144 tokens with the same savers on one GPU measured 39.5, predicted 33.5). From the repo root, the wheelhouse
# carried in .whl, on 2 GPUs:
#     bash bench/tools/memory_peak.sh $OUT          (~8.5 min; kind nvidia-h200-x2; RUNS="sp2-hist" for some)
# Every run: bf16, torch's fused AdamW, the learnable synthetic data, --no-comm-log, expandable segments, the 524k
# row's savers (checkpointing, --loss tiled, --act-ckpt-offload, --tiled-mlp), ZeRO-3 unless said:
#   8b-1step    llama-8b's layers, hidden, heads and vocabulary with 4 of its 32 layers (every activation part per rank
#               as the 524k row's: 131,072 tokens), 1 GPU, 1 step and no warm-up, as the 524k row ran
#   8b-2steps   the same, 1 timed step after 1 (the second step's forward runs with the optimizer's states alive)
#   8b-hist     8b-2steps with DSX_MEMORY_HISTORY (dsx/rank/memory_history.py): the peak's blocks by allocating code
#   1b-hist     llama-1b at 131,072 tokens, ZeRO-2, 1 timed step after 1, with DSX_MEMORY_HISTORY (the 262k row's
#               flags at half the length)
#   1b-z1-hist  1b-hist at ZeRO-1 (`dsx estimate --longest` proposes ZeRO-1 for llama-1b with these savers)
#   sp2-hist    the 4-layer llama-8b at 262,144 tokens, Ulysses 2 on 2 GPUs, 1 timed step after 1, with the history
#               (the all-to-alls' buffers: the same per rank as the 524k row's)
# Rows in $OUT/memory_peak/RUN.jsonl; bench/tools/memory_peak.py on each rank-0 history: RUN.md (+ .json); the log
# is $OUT/memory_peak/memory_peak.log.
set -uo pipefail
out=${1:?usage: bench/tools/memory_peak.sh OUT}
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
dir=$out/memory_peak
mkdir -p "$dir"
set_deadline "${DEADLINE_S:-570}"
start_log "$dir/memory_peak.log"
savers=(--zero 3 --precision bf16 --micro-batch 1 --act-ckpt --loss tiled --act-ckpt-offload --tiled-mlp
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true --no-comm-log)
eight=(--model llama-8b --set num_hidden_layers=4)
at131k=(--seq-len 131072 --set max_position_embeddings=131072)
declare -A runs=(
  [8b-1step]="${eight[*]} --gpus 1 ${at131k[*]} --steps 1 --warmup 0"
  [8b-2steps]="${eight[*]} --gpus 1 ${at131k[*]} --steps 1 --warmup 1"
  [8b-hist]="${eight[*]} --gpus 1 ${at131k[*]} --steps 1 --warmup 1"
  [1b-hist]="--model llama-1b --zero 2 --gpus 1 ${at131k[*]} --steps 1 --warmup 1"
  [1b-z1-hist]="--model llama-1b --zero 1 --gpus 1 ${at131k[*]} --steps 1 --warmup 1"
  [sp2-hist]="${eight[*]} --gpus 2 --sequence-parallel 2 --seq-len 262144 --set max_position_embeddings=262144
              --steps 1 --warmup 1"
)
for name in ${RUNS:-8b-1step 8b-2steps 8b-hist 1b-hist sp2-hist}; do
  history=()
  [[ $name == *-hist ]] && history=(DSX_MEMORY_HISTORY="$dir/$name.hist")
  rm -rf "$dir/$name.hist"
  # shellcheck disable=SC2086  # the run's flags are words
  run_by 150 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${history[@]}" \
    python3 -m dsx run "${savers[@]}" ${runs[$name]} --results "$dir/$name.jsonl" </dev/null
  for history in "$dir/$name.hist"/*/rank0.pickle; do  # DSX_MEMORY_HISTORY writes DIR/<run id>/rank<N>.pickle
    [ -s "$history" ] && run_by 90 python3 bench/tools/memory_peak.py "$history" --row "$dir/$name.jsonl" \
      --out "$dir/$name.md"
  done
  rm -rf "$dir/$name.hist" "${dir:?}/$name"  # the history (hundreds of MB) and the run's folder: rows and report stay
done
show_log
