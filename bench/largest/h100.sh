#!/usr/bin/env bash
# Issue 16 on one H100 80GB and its host (kind nvidia-h100-x1), from the repo root, with the wheelhouse carried in
# .whl (bench/gpu/README.md):
#     bash bench/largest/h100.sh $OUT [STEP...]          (default: largest)
# Steps, in order of importance, each meant for one device command (10 minutes at most); every run is bounded (a
# --timeout / --trial-timeout inside the step's own limit) and appends its row to a file in $OUT as it ends, so
# what was measured comes back even when the command is cut short:
#   largest  (~5-6 min) `dsx estimate --model llama-8b --largest` on this machine (its GPU kind, its RAM from psutil):
#            the largest Llama-3-shaped model dsx finds, then that model with the configuration it proposes, for a
#            few steps, as a one-configuration `dsx sweep` whose micro-batch search starts at the proposed
#            micro-batch and goes no higher (it shrinks only if that runs out of memory). Target: >= 8B parameters
#            at >= 100 model TFLOP/s. -> $OUT/largest.json, $OUT/largest.jsonl, $OUT/largest.log
#   gpt2xl   (~9-10 min: two compiled gpt2-xl runs of ~3.5-4 min each, most of it inductor's compilation) the
#            hand-tuned configuration of bench/mfu with the semantics the sweep keeps (ZeRO-2, compile, micro-batch
#            16 x grad-accum 8; GPT-2's own dropout 0.1, dsx's default clipping 1.0 and bf16 overflow check,
#            DeepSpeed's default AdamW), then the default search's predicted best (`dsx sweep --model gpt2-xl --top
#            1`: its plan's fastest configuration at the predicted largest micro-batch, --mb-max at that micro-batch
#            so that one trial runs unless it runs out of memory). Target: >= 95% of the hand-tuned tokens/s.
#            -> $OUT/gpt2xl.jsonl, $OUT/gpt2xl.log. The Trainer + stock ZeRO-2 figure to put beside it is
#            bench/clients/h100.sh's (issue 17), not re-run here.
#   llama7b  (~9.5 min, repeated until the sweep ends) the issue's full proof, `dsx sweep --model llama-7b` with no
#            other flags, for SWEEP_S seconds (default 480) of each command: its plan on this machine (dsx sweep
#            --model llama-7b --dry-run, tests/test_sweep_search.py) runs 3 configurations (ZeRO-3 + offload ratio
#            0.5 / 0.7 / 0.8, checkpointing), a few trials each from the predicted micro-batch; a trial is ~1.5 min of
#            start-up (zero.Init, pinned optimizer state) plus 7 steps of ~15-25 s. The sweep resumes from its
#            results file: the command starts from bench/largest/h100/llama7b.jsonl when $OUT has none (copy
#            $OUT/llama7b.jsonl there after each command and commit it); a trial cut by the deadline leaves no row and
#            runs again next time. -> $OUT/llama7b.jsonl, $OUT/llama7b_plan.txt, $OUT/llama7b.log
set -uo pipefail
out=${1:?usage: bench/largest/h100.sh OUT [largest gpt2xl llama7b]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(largest)
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
mkdir -p "$out"

for step in "${steps[@]}"; do
  case $step in
    largest)
      start_log "$out/largest.log"
      build_ops CPUAdamBuilder  # the offloaded optimizer's step (~50-70 s, once per machine)
      echo "ops built" >>"$log"
      free -g >>"$log"
      # the answer for this machine (its GPU kind, psutil's RAM), as JSON for the run and in the log
      echo "+ python3 -m dsx estimate --model llama-8b --largest --json" >>"$log"
      timeout 120 python3 -m dsx estimate --model llama-8b --largest --json >"$out/largest.json" 2>>"$log" ||
        { show_log; exit 1; }
      cat "$out/largest.json" >>"$log"
      # the proposed configuration as dsx sweep axes: one configuration, micro-batch at most the proposed one
      mapfile -t axes < <(python3 bench/largest/axes.py "$out/largest.json")
      echo "proposed: ${axes[*]}" >>"$log"
      RUN_SIGNAL=INT run 560 python3 -m dsx sweep "${axes[@]}" --steps 3 --warmup 1 --trial-timeout 270 \
        --results "$out/largest.jsonl"
      python3 -m dsx report "$out/largest.jsonl" >>"$log" 2>&1
      ;;
    gpt2xl)
      start_log "$out/gpt2xl.log"
      build_ops FusedAdamBuilder  # DeepSpeed's default AdamW on the GPU
      # the hand-tuned configuration (bench/mfu parts 5-7) with the semantics the sweep keeps: no --ds-set, no --set
      run 250 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --gpus 1 --zero 2 --compile --micro-batch 16 \
        --grad-accum 8 --steps 4 --warmup 2 --timeout 240 --results "$out/gpt2xl.jsonl"
      # the default search's plan here; its first configuration starts at the predicted largest micro-batch
      python3 -m dsx sweep --model gpt2-xl --vocab-pad 64 --top 1 --dry-run >"$out/gpt2xl_plan.txt" 2>&1
      cat "$out/gpt2xl_plan.txt" >>"$log"
      start=$(grep -m1 -oE 'start at micro-batch [0-9]+' "$out/gpt2xl_plan.txt" | grep -oE '[0-9]+$')
      RUN_SIGNAL=INT run 290 python3 -m dsx sweep --model gpt2-xl --vocab-pad 64 --top 1 --mb-max "${start:-16}" \
        --steps 4 --warmup 2 --trial-timeout 270 --results "$out/gpt2xl.jsonl"
      python3 -m dsx report "$out/gpt2xl.jsonl" >>"$log" 2>&1
      ;;
    llama7b)
      start_log "$out/llama7b.log"
      build_ops CPUAdamBuilder
      free -g >>"$log"
      [ -f "$out/llama7b.jsonl" ] || cp bench/largest/h100/llama7b.jsonl "$out/" 2>/dev/null || true
      python3 -m dsx sweep --model llama-7b --dry-run >"$out/llama7b_plan.txt" 2>&1
      RUN_SIGNAL=INT run "${SWEEP_S:-480}" python3 -m dsx sweep --model llama-7b --results "$out/llama7b.jsonl"
      python3 -m dsx report "$out/llama7b.jsonl" >>"$log" 2>&1
      ;;
    *)
      echo "unknown step '$step' (steps: largest gpt2xl llama7b)" >&2
      exit 2
      ;;
  esac
  show_log
done
