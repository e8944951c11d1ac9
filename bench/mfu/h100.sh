#!/usr/bin/env bash
# The MFU study (issue 3: `dsx run` against a compiled plain-PyTorch baseline; bench/mfu/README.md) on one GPU, one
# step per `device` command (kind nvidia-h100-x1), from the repo root, with the wheelhouse carried in .whl:
#     bash bench/mfu/h100.sh $OUT STEP...
# Each step writes its log ($OUT/h100.log, $OUT/h100_partN.log, $OUT/gpt2_124m.log) and rows into $OUT, as the
# script it replaces did; every step keeps that script's flags and time limits (the scripts were
# bench/gpu/issue3_h100.sh, bench/gpu/issue3_h100_part{2..7}.sh and bench/gpu/issue3_gpt2.sh):
#   gpt2   GPT-2 124M (seq 1024, vocab padded to 50304): baseline and dsx run in one command (it landed on 2x H200:
#          h200x2_gpt2_124m/)
#   part1  GPT-2 124M baseline + dsx; gpt2-xl ZeRO-2, ZeRO-3, ZeRO-3 + CPU offload + checkpointing; BERT-base and
#          ALBERT-base at seq 512 (h100/)
#   part2  BERT-base seq 512 at two large micro-batches (part 1's ran out of its time limit), gpt2-xl ZeRO-2 +
#          engine.compile()
#   part3  BERT-base and ALBERT-base pushed to the largest micro-batch that fits (an OOM is a row too)
#   part4  GPT-2 124M against the compiled baseline doing the baseline's work and no more (no clipping, no bf16
#          overflow check), then bench/tools/step_profile.py (h100_tuned/)
#   part5  gpt2-xl ZeRO-2 + compile at micro-batch 16 (12 if 16 does not fit), then grad-accum 4
#   part6  part 5 with GPT-2's dropout set to 0, then bench/tools/step_profile.py on the part-5 configuration
#   part7  part 6 with 8 micro-batches per optimizer step
#   autocast  GPT-2 124M at micro-batch 32, compiled: the baseline, then dsx run with DeepSpeed's bf16 (bf16 weights,
#          fp32 master copy) against torch.autocast over fp32 weights (DeepSpeed's torch_autocast section: no
#          per-tensor overflow check), each with dsx's defaults (clipping 1.0) and as the baseline trains (no
#          clipping); within a deadline of DEADLINE_S s (default 560), the most telling runs first (the first
#          command, h200_autocast/, spelled bf16-autocast `--precision fp32 --ds-set torch_autocast.enabled=true
#          --ds-set torch_autocast.dtype=bfloat16`: the flag did not exist yet)
#   autocast-llama  llama-1b (seq 2048) at ZeRO-2, micro-batch 4, bf16 against bf16-autocast on one GPU: dsx run at
#          grad-accum 2 (the 1-GPU rows of bench/multigpu's autocast2 pairs), then bench/tools/step_profile.py's
#          forward / backward / step and kernels, alternating twice (why autocast was 0.86x bf16 on 2 GPUs)
#   fused-loss  GPT-2 124M at micro-batch 32, compiled, doing the baseline's work (no clipping, no overflow check):
#          the baseline, dsx run, dsx run --loss fused (Liger's fused linear cross-entropy, outside the compiled
#          graph), each twice in that order, within DEADLINE_S s (default 560)
set -uo pipefail
steps="gpt2 part1 ... part7 autocast autocast-llama fused-loss"
usage="usage: bench/mfu/h100.sh OUT STEP... (steps: $steps)"
[ $# -gt 1 ] || { echo "$usage" >&2; exit 2; }
out=$1
shift
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
as_baseline=("${adam[@]}" --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false)  # what the baseline does
no_dropout=(--set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0)
baseline=(python3 bench/tools/torch_baseline.py --model gpt2 --vocab-pad 64)

for step in "$@"; do
  res=$out/runs.jsonl
  case $step in
    gpt2)
      res=$out/gpt2_124m.jsonl
      start_log "$out/gpt2_124m.log"
      python3 -m dsx doctor >>"$log" 2>&1
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --results "$res" --timeout 240)
      # baseline and dsx alternate, all in this one command on this one GPU
      run 260 "${baseline[@]}" --micro-batch 32 --compile --out "$out/baseline.jsonl"
      run 260 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 32 --compile "${adam[@]}"
      run 260 python3 -m dsx run "${gpt2[@]}" --zero 0 --micro-batch 32 --compile "${adam[@]}"
      run 260 python3 -m dsx run "${gpt2[@]}" --zero 2 --micro-batch 16 "${adam[@]}"
      run 260 "${baseline[@]}" --micro-batch 16 --out "$out/baseline.jsonl"
      ;;
    part1)
      start_log "$out/h100.log"
      python3 -m dsx doctor >>"$log" 2>&1
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --gpus 1 --results "$res")
      xl=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --steps 10 --warmup 3 --gpus 1 --results "$res")
      bert=(--seq-len 512 --micro-batch 128 --steps 20 --warmup 5 --gpus 1 --zero 1 "${adam[@]}" --results "$res")
      run 120 "${baseline[@]}" --micro-batch 32 --compile --out "$out/baseline.jsonl"
      run 150 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 32 --compile "${adam[@]}" --flop-check
      run 120 python3 -m dsx run "${xl[@]}" --zero 2 --micro-batch 8 "${adam[@]}"
      run 120 python3 -m dsx run "${xl[@]}" --zero 3 --micro-batch 8 "${adam[@]}"
      # the committed h100.log ran this one with 60 s and it timed out before its first step (rerun in part 2)
      run 150 python3 -m dsx run --model bert-base "${bert[@]}"
      run 60 python3 -m dsx run --model albert-base "${bert[@]}"
      run 200 python3 -m dsx run "${xl[@]}" --zero 3 --offload cpu --offload-params cpu --act-ckpt --micro-batch 32 \
        --steps 5 --warmup 2
      ;;
    part2)
      start_log "$out/h100_part2.log"
      bert=(--model bert-base --seq-len 512 --steps 20 --warmup 5 --gpus 1 --zero 1 --results "$res" --timeout 170)
      run 180 python3 -m dsx run "${bert[@]}" --micro-batch 128 "${adam[@]}"
      run 180 python3 -m dsx run "${bert[@]}" --micro-batch 192 "${adam[@]}"
      run 230 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --seq-len 1024 --steps 10 --warmup 3 --gpus 1 --zero 2 \
        --micro-batch 8 --compile "${adam[@]}" --results "$res" --timeout 220
      ;;
    part3)
      start_log "$out/h100_part3.log"
      for model in bert-base:256 bert-base:320 albert-base:192 albert-base:256; do
        run 120 python3 -m dsx run --model "${model%:*}" --seq-len 512 --micro-batch "${model#*:}" --steps 10 \
          --warmup 3 --gpus 1 --zero 1 "${adam[@]}" --results "$res" --timeout 110
      done
      ;;
    part4)
      start_log "$out/h100_part4.log"
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --gpus 1 --results "$res" --timeout 110
            --tf32 --compile "${as_baseline[@]}")
      run 90 "${baseline[@]}" --micro-batch 32 --compile --out "$out/baseline.jsonl"
      run 120 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 32
      run 120 python3 -m dsx run "${gpt2[@]}" --zero 0 --micro-batch 32
      run 90 "${baseline[@]}" --micro-batch 64 --compile --out "$out/baseline.jsonl"
      run 120 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 64
      python3 -m dsx config --zero 1 --micro-batch 32 --set optimizer.params.torch_adam=true \
        --set optimizer.params.fused=true --set gradient_clipping=0 --set bf16.check_grad_overflow=false \
        -o "$out/ds_zero1_lean.json" >>"$log" 2>&1
      run 150 python3 bench/tools/step_profile.py --model gpt2 --vocab-pad 64 --micro-batch 32 --compile \
        --ds-config "$out/ds_zero1_lean.json" --out "$out/profile.jsonl"
      cut -c1-600 "$out"/baseline.jsonl "$out"/profile.jsonl
      ;;
    part5)
      start_log "$out/h100_part5.log"
      xl=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --warmup 3 --gpus 1 --zero 2 --results "$res" --timeout 270
          --tf32 --compile "${as_baseline[@]}")
      mb=16
      run 280 python3 -m dsx run "${xl[@]}" --micro-batch $mb --steps 10 ||
        { mb=12; run 280 python3 -m dsx run "${xl[@]}" --micro-batch $mb --steps 10; }
      run 250 python3 -m dsx run "${xl[@]}" --micro-batch $mb --grad-accum 4 --steps 5
      ;;
    part6)
      start_log "$out/h100_part6.log"
      run 280 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --seq-len 1024 --warmup 3 --gpus 1 --zero 2 \
        --results "$res" --timeout 270 --tf32 --compile "${as_baseline[@]}" --micro-batch 16 --grad-accum 4 \
        --steps 5 "${no_dropout[@]}"
      python3 -m dsx config --zero 2 --micro-batch 16 --set optimizer.params.torch_adam=true \
        --set optimizer.params.fused=true --set gradient_clipping=0 --set bf16.check_grad_overflow=false \
        -o "$out/ds_zero2_lean.json" >>"$log" 2>&1
      run 250 python3 bench/tools/step_profile.py --model gpt2-xl --vocab-pad 64 --micro-batch 16 --compile \
        --only deepspeed --ds-config "$out/ds_zero2_lean.json" --warmup 3 --steps 5 --profile-steps 2 \
        --out "$out/profile_xl.jsonl"
      cut -c1-2500 "$out/profile_xl.jsonl"
      ;;
    part7)
      start_log "$out/h100_part7.log"
      run 300 python3 -m dsx run --model gpt2-xl --vocab-pad 64 --seq-len 1024 --warmup 2 --gpus 1 --zero 2 \
        --results "$res" --timeout 290 --tf32 --compile "${as_baseline[@]}" --micro-batch 16 --grad-accum 8 \
        --steps 5 "${no_dropout[@]}"
      ;;
    autocast)
      start_log "$out/autocast.log"
      set_deadline "${DEADLINE_S:-560}"
      ac=(--precision bf16-autocast)
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --gpus 1 --results "$res" --tf32
            --compile "${adam[@]}" --zero 1 --micro-batch 32)
      run_by 100 "${baseline[@]}" --micro-batch 32 --compile --out "$out/baseline.jsonl"
      run_by 130 python3 -m dsx run "${gpt2[@]}" --timeout 120
      run_by 130 python3 -m dsx run "${gpt2[@]}" "${ac[@]}" --timeout 120
      run_by 100 python3 -m dsx run "${gpt2[@]}" "${ac[@]}" --ds-set gradient_clipping=0 --timeout 90
      run_by 100 python3 -m dsx run "${gpt2[@]}" --ds-set gradient_clipping=0 --ds-set bf16.check_grad_overflow=false \
        --timeout 90
      run_by 80 "${baseline[@]}" --micro-batch 32 --compile --out "$out/baseline.jsonl"
      python3 -m dsx report "$res" >>"$log" 2>&1
      ;;
    autocast-llama)
      start_log "$out/autocast_llama.log"
      set_deadline "${DEADLINE_S:-560}"
      llama=(--model llama-1b --micro-batch 4 --grad-accum 2 --gpus 1 --zero 2 "${adam[@]}" --steps 3 --warmup 2
             --results "$res" --timeout 100)
      for prec in bf16 bf16-autocast; do
        run_by 120 python3 -m dsx run "${llama[@]}" --precision "$prec"
        python3 -m dsx config --zero 2 --micro-batch 4 --precision "$prec" --set optimizer.params.torch_adam=true \
          --set optimizer.params.fused=true -o "$out/ds_zero2_$prec.json" >>"$log" 2>&1
      done
      for prec in bf16 bf16-autocast bf16 bf16-autocast; do
        run_by 100 python3 bench/tools/step_profile.py --model llama-1b --micro-batch 4 --only deepspeed \
          --ds-config "$out/ds_zero2_$prec.json" --warmup 3 --steps 8 --profile-steps 2 --out "$out/profile.jsonl"
      done
      python3 -m dsx report "$res" >>"$log" 2>&1
      ;;
    fused-loss)
      start_log "$out/fused_loss.log"
      set_deadline "${DEADLINE_S:-560}"
      gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --gpus 1 --results "$res" --tf32
            --compile "${as_baseline[@]}" --zero 1 --micro-batch 32 --timeout 110)
      for round in 1 2; do
        run_by 90 "${baseline[@]}" --micro-batch 32 --compile --out "$out/baseline.jsonl"
        run_by 120 python3 -m dsx run "${gpt2[@]}"
        run_by 120 python3 -m dsx run "${gpt2[@]}" --loss fused
      done
      python3 -m dsx report "$res" >>"$log" 2>&1
      ;;
    *)
      echo "unknown step '$step' (steps: $steps)" >&2
      exit 2
      ;;
  esac
  show_log
done
