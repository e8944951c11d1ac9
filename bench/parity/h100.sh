#!/usr/bin/env bash
# The parity issue's (29) GPU evidence on one H100 (kind nvidia-h100-x1), from the repo root, with the wheelhouse
# carried in .whl (bench/gpu/README.md):
#     bash bench/parity/h100.sh $OUT [PART...]        (default: gpt2xl llama7b data; each part bounded by a deadline
#                                                     of DEADLINE_S, default 560 s, for the whole command)
# Parts (estimates, not measurements: the first command's log says what they took):
#   llama7b  (~2.5 min) `dsx check` of the configuration `dsx sweep --model llama-7b` picked on this GPU (ZeRO-3 +
#            optimizer offload ratio 0.5 + activation checkpointing) against ZeRO-3 without offload or checkpointing
#            (--reference-zero 3), 20 steps on the learnable data. The full 6.7B does not fit ZeRO-3 without offload
#            on one 80 GB card (16 bytes a parameter: 108 GB), so the check keeps the 7B's width and 8 of its 32
#            layers (1.88B parameters); micro-batch 4 x grad-accum 2; DeepSpeed's default AdamW as the sweep ran it (the
#            candidate's offloaded half steps on DeepSpeedCPUAdam, the references on FusedAdam).
#            -> $OUT/parity.jsonl, $OUT/llama7b.log
#   gpt2xl   (~4 min) `dsx check` of gpt2-xl's fastest configuration (bench/mfu: ZeRO-2, engine.compile(), the
#            vocabulary padded to 50304, dropout 0, torch's fused AdamW) against eager plain data parallel (ZeRO-0),
#            at micro-batch 8 x grad-accum 2 (the MFU row's 16 x 8 makes a 9-minute check), 10 steps with the
#            learning rate warmed up over them (WarmupLR to 1e-4).
#            -> $OUT/parity.jsonl, $OUT/gpt2xl.log
#   data     (~1.2 min a pair) the learnable synthetic data against today's uniform random tokens: GPT-2 124M,
#            ZeRO-1, micro-batch 16, 20 timed steps after 5, PAIRS (default 3) alternating pairs in this one command
#            (tokens/s and the data wait of each row). -> $OUT/data.jsonl, $OUT/data.log
# Copy $OUT/*.jsonl and logs into bench/parity/h100/ after the command and commit them.
set -uo pipefail
out=${1:?usage: bench/parity/h100.sh OUT [gpt2xl llama7b data]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(gpt2xl llama7b data)
source bench/gpu/prelude.sh "${WHEELHOUSE:-.whl}" || exit 1
set_deadline "${DEADLINE_S:-560}"
mkdir -p "$out"
export RUN_SIGNAL=INT  # dsx stops its ranks' process group and exits; the rows so far stay
nodrop=(--set resid_pdrop=0 --set embd_pdrop=0 --set attn_pdrop=0)
# gpt2-xl at lr 1e-4 from step 0 spikes to a loss of 15 at step 3 (the first command's rows, first_gpt2xl.log): a
# warm-up over the check's 10 steps keeps it stable, where the check can tell compile from a wrong gradient
warmup='{"type":"WarmupLR","params":{"warmup_min_lr":0,"warmup_max_lr":1e-4,"warmup_num_steps":10}}'

start_log "$out/ops.log"
ops_pid=
if [[ " ${parts[*]} " == *" llama7b "* ]]; then  # llama7b's optimizers (DeepSpeed's default AdamW, as the sweep ran
  build_ops CPUAdamBuilder FusedAdamBuilder >/dev/null 2>&1 &  # it), built while gpt2xl runs
  ops_pid=$!
fi

for part in "${parts[@]}"; do
  start_log "$out/$part.log"
  case $part in
    llama7b)
      [ -n "$ops_pid" ] && wait "$ops_pid" 2>/dev/null
      run_by 240 python3 -m dsx check --model llama-7b --set num_hidden_layers=8 --zero 3 --offload cpu \
        --ds-set zero_optimization.offload_optimizer.ratio=0.5 --act-ckpt --micro-batch 4 --grad-accum 2 \
        --steps 18 --warmup 2 --reference-zero 3 --results "$out/parity.jsonl"
      ;;
    gpt2xl)
      run_by 300 python3 -m dsx check --model gpt2-xl --vocab-pad 64 "${nodrop[@]}" --zero 2 --compile \
        --micro-batch 8 --grad-accum 2 --steps 8 --warmup 2 "${adam[@]}" --ds-set "scheduler=$warmup" \
        --results "$out/parity.jsonl"
      ;;
    data)
      for _ in $(seq "${PAIRS:-3}"); do
        for data in synthetic random; do
          run_by 100 python3 -m dsx run --model gpt2 --vocab-pad 64 --zero 1 --micro-batch 16 --steps 20 --warmup 5 \
            "${adam[@]}" --data "$data" --results "$out/data.jsonl"
        done
      done
      python3 bench/parity/pairs.py "$out/data.jsonl" >>"$log" 2>&1
      ;;
    *) echo "bench/parity/h100.sh: unknown part $part" >&2 ;;
  esac
  grep -E '^\+|^exit|^verdict|^note|^OK|^pairs|^ratio|^  (loss|data|throughput)' "$log"
done
