#!/usr/bin/env bash
# The race of issue 31 for one model, on one GPU: DeepSpeed's autotuner, `dsx sweep` restricted to stage x
# micro-batch, `dsx sweep` with no flags, all under one global-batch cap; then every winner
# re-measured in one harness (train.py under `dsx launch`), alternating. From the repo root:
#     bash bench/peers/autotuner/race.sh WORK MODEL SEQ CAP [REPEATS]
# It sources bench/gpu/prelude.sh .whl (PRELUDE_NO_INSTALL=1 on a machine whose python3 has DeepSpeed: CPU ranks).
# WORK gets every tool's output and the wall times (walls.jsonl); summarize.py reads it. A race longer than one
# device command runs under bench/peers/autotuner/device.sh (start, then wait). PRECISION=fp32 for CPU ranks.
set -u
source bench/gpu/prelude.sh .whl || exit 1
work=$1 model=$2 seq=$3 cap=$4 repeats=${5:-2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
precision=${PRECISION:-bf16}
trainer_precision=(); [ "$precision" != fp32 ] && trainer_precision=("--$precision")
# the Trainer's arguments of every run of train.py: what is trained, the same for every tool and trial
trainer=(--model "$model" --seq_len "$seq" --report_to none --save_strategy no --learning_rate 1e-4
         --logging_steps 1 --warmup_steps 5 "${trainer_precision[@]}")
# DeepSpeed 0.19's op builder cannot parse the hosts' 9.0a; dsx gives its ranks 9.0 (one JIT build for all)
[ -n "${TORCH_CUDA_ARCH_LIST:-}" ] && export TORCH_CUDA_ARCH_LIST=9.0
mkdir -p "$work" && cd "$work" || exit 1

timed() {  # timed NAME LIMIT COMMAND...: run it, append {"part", "wall_s", "exit"} to walls.jsonl
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s.%N)
  run "$limit" "$@"
  rc=$?
  python3 -c "import json,sys; print(json.dumps({'part': sys.argv[1], 'wall_s': round(float(sys.argv[3]) - float(sys.argv[2]), 1), 'exit': int(sys.argv[4])}))" \
    "$name" "$t0" "$(date +%s.%N)" "$rc" >>walls.jsonl
}

[ -f race.log ] && mv race.log "race.$(date +%s).log"  # a resumed race keeps the earlier command's log
start_log "$work/race.log"
echo "race: $model seq $seq, global batch cap $cap, $precision" >>"$log"
command -v nvidia-smi >/dev/null && build_ops FusedAdamBuilder  # both tools' optimizer: built before either runs

autotune() {
  [ -f autotuning_results/ds_config_optimal.json ] && return
  python3 "$here/autotune_config.py" --max-train-batch-size "$cap" --precision "${precision/fp32/bf16}" >ds_autotune.json
  log=$work/autotune.log
  timed autotuner 3000 deepspeed --autotuning tune --num_gpus 1 "$here/train.py" --deepspeed ds_autotune.json \
    "${trainer[@]}" --output_dir at_trials --max_steps 20 --per_device_train_batch_size 1 --gradient_accumulation_steps 1
}
sweeps() {
  log=$work/sweep.log
  [ -f sweep_restricted.done ] || { timed dsx_restricted 3000 dsx sweep --model "$model" --seq-len "$seq" \
    --max-global-batch "$cap" --precision "$precision" --zero 0,1,2,3 --offload none --act-ckpt off --compile off \
    --micro-batch auto --results sweep_restricted.jsonl && touch sweep_restricted.done; }
  [ -f sweep.done ] || { timed dsx 3000 dsx sweep --model "$model" --seq-len "$seq" --max-global-batch "$cap" \
    --precision "$precision" --results sweep.jsonl && touch sweep.done; }
}
# DSX_FIRST=1: dsx's two sweeps before the autotuner (a race that may not finish keeps dsx's answers)
if [ -n "${DSX_FIRST:-}" ]; then sweeps; autotune; else autotune; sweeps; fi

log=$work/remeasure.log
winners=()
python3 "$here/harness_config.py" autotuner autotuning_results/ds_config_optimal.json autotuner.json \
  >autotuner.flags 2>>"$log" && winners+=(autotuner)
if python3 "$here/harness_config.py" dsx sweep_restricted.jsonl dsx_restricted.json >dsx_restricted.flags 2>>"$log"; then
  # the same answer as the autotuner's is measured once (summarize.py reads the autotuner's runs for both)
  if python3 "$here/harness_config.py" same autotuner.json dsx_restricted.json && \
      cmp -s dsx_restricted.flags autotuner.flags; then
    touch dsx_restricted.same
  else
    winners+=(dsx_restricted)
  fi
fi
python3 "$here/harness_config.py" dsx sweep.jsonl dsx.json >dsx.flags 2>>"$log" && winners+=(dsx)
for winner in "${winners[@]}"; do  # a resumed race whose tool answered anew re-measures the new answer
  mkdir -p remeasure && cat "$winner.json" "$winner.flags" >"remeasure/$winner.answer.new"
  if [ -f "remeasure/$winner.answer.txt" ] && ! cmp -s "remeasure/$winner.answer.new" "remeasure/$winner.answer.txt"; then
    mkdir -p remeasure/superseded && mv remeasure/"$winner"-* remeasure/superseded/ 2>/dev/null
  fi
  mv "remeasure/$winner.answer.new" "remeasure/$winner.answer.txt"
done
for i in $(seq 1 "$repeats"); do
  for winner in "${winners[@]}"; do
    [ -f "remeasure/$winner-$i/ran.json" ] && continue
    mapfile -t flags <"$winner.flags"
    timed "remeasure:$winner:$i" 900 dsx launch --config "$winner.json" --config-arg --deepspeed --seq-len "$seq" \
      --results launches.jsonl -- python3 "$here/train.py" "${trainer[@]}" --output_dir "remeasure/$winner-$i" \
      --max_steps 15 --skip_steps 5 "${flags[@]}"
  done
done
touch race.done
