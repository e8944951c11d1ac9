#!/usr/bin/env bash
# Issue 3 evidence, part 1, on the H100 host (one call of the `device` tool, run from the repo root):
#   GPT-2 124M (seq 1024, vocab padded to 50304): dsx run vs the plain-PyTorch baseline, in one command.
# Usage on the host:  bash bench/gpu/issue3_gpt2.sh $OUT
set -uo pipefail
out=${1:?output dir}
source .whl/prelude.sh .whl
export PYTHONPATH=$PWD:$PYTHONPATH
res=$out/gpt2_124m.jsonl
log=$out/gpt2_124m.log
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  python3 -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
  python3 -m dsx doctor
} >"$log" 2>&1
common=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --results "$res" --timeout 240)
adam=(--ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true)
run() { echo "+ $*" >>"$log"; timeout 260 "$@" >>"$log" 2>&1; echo "exit $?" >>"$log"; }
# baseline and dsx alternate, all in this one command on this one GPU
run python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 32 --compile --out "$out/baseline.jsonl"
run python3 -m dsx run "${common[@]}" --zero 1 --micro-batch 32 --compile "${adam[@]}"
run python3 -m dsx run "${common[@]}" --zero 0 --micro-batch 32 --compile "${adam[@]}"
run python3 -m dsx run "${common[@]}" --zero 2 --micro-batch 16 "${adam[@]}"
run python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 16 --out "$out/baseline.jsonl"
tail -c 5000 "$log"
