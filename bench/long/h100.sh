#!/usr/bin/env bash
# Long context on one H100 (issue 32, bench/long/README.md), from the repo root, the wheelhouse carried in .whl:
#     bash bench/long/h100.sh $OUT PART...        # kind nvidia-h100-x1, carry [".whl"]
# Parts (each one device command; rows appended to $OUT/PART.jsonl, the log in $OUT/PART.log):
#   pairs    --loss tiled against the plain loss where the plain one fits: llama-1b (dsx's preset, 0.51B) at 8,192
#            tokens, ZeRO-2, checkpointing, micro-batch 1, plain, tiled, plain, tiled (alternating pairs in one
#            command), 5 timed steps after 2; PAIR_LOSSES="plain fused plain fused": Liger's fused loss instead
#   micro    the head + loss alone (bench/long/loss_micro.py): plain, the tiled loss's fused and autograd tiles at
#            three tile sizes, Liger's fused linear cross-entropy; llama-1b's head (8,192 tokens, hidden 2048,
#            vocabulary 128,256), forward + backward, 20 timed calls each (~1 minute)
#   longest  llama-1b at 262,144 tokens: --loss tiled with checkpointing, then the same with --act-ckpt-offload and
#            --tiled-mlp (what they take off the GPU), 2 timed steps after 1
#   savers   what each memory saver costs a step: llama-1b at 131,072 tokens, --loss tiled with checkpointing, then
#            + --act-ckpt-offload, + --tiled-mlp, + both, 2 timed steps after 1 (~5.5 min on an H200)
#   8b       llama-8b (Llama-3-8B's shape) at 131,072 tokens on one GPU as `dsx estimate --model llama-8b --longest`
#            proposes on an H200 (ZeRO-3, 60% of the optimizer offloaded to the CPU, --loss tiled, checkpointing,
#            expandable segments, DeepSpeed's CPU Adam), 1 timed step after 1
#   8b-long  llama-8b at LENGTH tokens (default 196,608) on one H200 with both savers: ZeRO-3, 30% of the optimizer
#            offloaded to the CPU (DeepSpeed's CPU Adam), --loss tiled, checkpointing, --act-ckpt-offload,
#            --tiled-mlp, expandable segments; one step, no warm-up (at 262,144 the start and two steps do not fit one
#            10-minute command, and the 128 GiB host killed the rank: bench/long/h200_8b_long)
#   longest-8b  what `dsx estimate --model llama-8b --longest` answers on this machine with both savers, run as it
#            says except its steps: 1 timed step after 1 (the second step's backward is the first with Adam's
#            moments on the GPU), the answer in $OUT/longest-8b.json
# Every run: bf16, torch's fused AdamW (no JIT build; 8b: CPU Adam), the learnable synthetic data, --no-comm-log (one rank).
set -uo pipefail
out=${1:?usage: bench/long/h100.sh OUT PART...}
shift
source "${PRELUDE:-bench/gpu/prelude.sh}" "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${BUDGET_S:-570}"
mkdir -p "$out"
common=(--model llama-1b --gpus 1 --zero 2 --precision bf16 --micro-batch 1 --act-ckpt --no-comm-log
        --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
for part in "$@"; do
  res=$out/$part.jsonl
  start_log "$out/$part.log"
  case $part in
    pairs)
      for loss in ${PAIR_LOSSES:-plain tiled plain tiled}; do
        run_by 150 python3 -m dsx run "${common[@]}" --seq-len 8192 --loss "$loss" --steps 5 --warmup 2 \
          --results "$res" </dev/null
      done ;;
    micro)
      run_by 150 python3 bench/long/loss_micro.py --out "$res" </dev/null ;;
    longest)
      long=(--seq-len 262144 --set max_position_embeddings=262144 --loss tiled --steps 2 --warmup 1)
      run_by 300 python3 -m dsx run "${common[@]}" "${long[@]}" --results "$res" </dev/null
      run_by 300 python3 -m dsx run "${common[@]}" "${long[@]}" --act-ckpt-offload --tiled-mlp --results "$res" \
        </dev/null ;;
    savers)
      half=(--seq-len 131072 --set max_position_embeddings=131072 --loss tiled --steps 2 --warmup 1)
      for saver in "" --act-ckpt-offload --tiled-mlp "--act-ckpt-offload --tiled-mlp"; do
        # shellcheck disable=SC2086  # the savers are words, or none
        run_by 130 python3 -m dsx run "${common[@]}" "${half[@]}" $saver --results "$res" </dev/null
      done ;;
    8b)
      BUILD_S=150 build_ops CPUAdamBuilder  # the offloaded optimizer's step (~50-70 s, once per machine)
      run_by 560 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 -m dsx run --model llama-8b \
        --gpus 1 --zero 3 --offload cpu --ds-set zero_optimization.offload_optimizer.ratio=0.6 --precision bf16 \
        --micro-batch 1 --act-ckpt --loss tiled --no-comm-log --seq-len 131072 \
        --set max_position_embeddings=131072 --steps 1 --warmup 1 --results "$res" </dev/null ;;
    8b-long)
      length=${LENGTH:-196608}
      BUILD_S=150 build_ops CPUAdamBuilder
      run_by 560 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 -m dsx run --model llama-8b \
        --gpus 1 --zero 3 --offload cpu --ds-set zero_optimization.offload_optimizer.ratio=0.3 --precision bf16 \
        --micro-batch 1 --act-ckpt --loss tiled --act-ckpt-offload --tiled-mlp --no-comm-log --seq-len "$length" \
        --set max_position_embeddings="$length" --steps 1 --warmup 0 --results "$res" </dev/null ;;
    longest-8b)
      BUILD_S=150 build_ops CPUAdamBuilder
      echo "+ python3 -m dsx estimate --model llama-8b --longest --json > $out/longest-8b.json" >>"$log"
      timeout 120 python3 -m dsx estimate --model llama-8b --longest --json >"$out/longest-8b.json" 2>>"$log" \
        </dev/null
      echo "exit $?" >>"$log"
      # the answer with both savers (its environment, then `dsx run ...`), its steps cut to one after one warm-up
      read -ra proposed < <(python3 -c 'import json, shlex, sys; a = json.load(open(sys.argv[1]))[-1]
print(" ".join(shlex.split(a["command"])).replace(" dsx run ", " python3 -m dsx run ")
      .replace("--steps 5 --warmup 2", "--steps 1 --warmup 1"))' "$out/longest-8b.json")
      run_by 560 env "${proposed[@]}" --results "$res" </dev/null ;;
    *) echo "bench/long/h100.sh: unknown part '$part' (pairs, micro, longest, savers, 8b, 8b-long, longest-8b)" >&2
       exit 2 ;;
  esac
  [ -s "$res" ] && [ "$part" != micro ] && python3 -m dsx report "$res" --format markdown >>"$log" 2>&1
done
show_log
