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
common=(--model gpt2 --vocab-pad 64 --seq-len 1024 --steps 20 --warmup 5 --results "$res")
# baselines first (same process tree, same GPU, same command)
for mb in 16 32; do
  python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch $mb --compile --out "$out/baseline.jsonl" >>"$log" 2>&1
done
python3 bench/torch_baseline.py --model gpt2 --vocab-pad 64 --micro-batch 16 --out "$out/baseline.jsonl" >>"$log" 2>&1
# dsx run: eager DeepSpeed default, then the fastest configurations we know of
python3 -m dsx run "${common[@]}" --zero 2 --micro-batch 16 >>"$log" 2>&1
for zero in 0 1; do
  python3 -m dsx run "${common[@]}" --zero $zero --micro-batch 32 --compile \
    --ds-set optimizer.params.torch_adam=true --ds-set optimizer.params.fused=true >>"$log" 2>&1
done
tail -c 6000 "$log"
