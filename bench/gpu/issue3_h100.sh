#!/usr/bin/env bash
# Issue 3 evidence on one H100 (one `device` call, kind nvidia-h100-x1, run from the repo root):
#   1. GPT-2 124M seq 1024: plain-PyTorch compiled baseline and dsx run, same command, same GPU
#   2. GPT-2 1.56B (gpt2-xl): ZeRO-2, ZeRO-3, ZeRO-3 + CPU offload (+ activation checkpointing)
#   3. BERT-base and ALBERT-base (seq 512) at large micro-batches, for the seed's columns
# Usage on the host:  bash bench/gpu/issue3_h100.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/runs.jsonl
log=$out/h100.log
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
  python3 -m dsx doctor
} >"$log" 2>&1
adam=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
run() { echo "+ $*" >>"$log"; timeout "$1" "${@:2}" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
gpt2=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --gpus 1 --results "$res")
xl=(--model gpt2-xl --vocab-pad 64 --seq-len 1024 --steps 10 --warmup 3 --gpus 1 --results "$res")
run 120 python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 32 --compile --out "$out/baseline.jsonl"
run 150 python3 -m dsx run "${gpt2[@]}" --zero 1 --micro-batch 32 --compile "${adam[@]}" --flop-check
run 120 python3 -m dsx run "${xl[@]}" --zero 2 --micro-batch 8 "${adam[@]}"
run 120 python3 -m dsx run "${xl[@]}" --zero 3 --micro-batch 8 "${adam[@]}"
run 150 python3 -m dsx run --model bert-base --seq-len 512 --micro-batch 128 --steps 20 --warmup 5 --gpus 1 --zero 1 "${adam[@]}" --results "$res"
run 60 python3 -m dsx run --model albert-base --seq-len 512 --micro-batch 128 --steps 20 --warmup 5 --gpus 1 --zero 1 "${adam[@]}" --results "$res"
run 200 python3 -m dsx run "${xl[@]}" --zero 3 --offload cpu --offload-params cpu --act-ckpt --micro-batch 32 --steps 5 --warmup 2
tail -c 3000 "$log"
