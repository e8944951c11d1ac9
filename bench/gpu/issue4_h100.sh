#!/usr/bin/env bash
# Issue 4 evidence on one H100: two real `dsx sweep`s, resumed across commands (a command may run 10 minutes and
# the host keeps nothing, so each command re-runs the same sweeps and they go on from the results files that
# were carried back in).
#   1. parameter effects on bert-base (seq 512, ZeRO-1, micro-batch 64): vocab / seq / layers / hidden / ffn
#      reduced one at a time;
#   2. gpt2-xl shape: ZeRO 1-3 x optimizer offload none/cpu x activation checkpointing off/on, micro-batch auto.
# Usage on the host, from the repo root:  bash bench/gpu/issue4_h100.sh $OUT [SECONDS]
set -uo pipefail
out=${1:?output dir}
budget=${2:-540}
start=$(date +%s)
if [ -d /tmp/site/deepspeed ]; then  # a warm host from the previous command: reinstalling would touch the
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/torch_extensions
  export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}  # sources and rebuild the ops
else
  source .whl/prelude.sh .whl
fi
export PYTHONPATH=$PWD:$PYTHONPATH
dir=bench/results/issue4/h100
mkdir -p "$dir"
log=$out/issue4_h100_$(date -u +%Y%m%dT%H%M%SZ).log
echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)" >"$log"
python3 -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)" >>"$log" 2>&1

# DeepSpeed JIT-builds FusedAdam (no offload) and CPUAdam (offload) on first use, ~50-70 s each: build both at
# once before the sweeps (TORCH_CUDA_ARCH_LIST as dsx gives the ranks; the host's 9.0a breaks the builder).
for op in FusedAdamBuilder CPUAdamBuilder; do
  TORCH_CUDA_ARCH_LIST=9.0 python3 -c "from deepspeed.ops.op_builder import $op; $op().load()" >>"$log" 2>&1 &
done
wait
echo "ops built after $(( $(date +%s) - start )) s" >>"$log"

# keep copies in $OUT as rows arrive: if the command is cut short, what was measured still comes back
( while sleep 15; do cp "$dir"/*.jsonl "$out"/ 2>/dev/null; cp "$log" "$out"/ 2>/dev/null; done ) &
left() { echo $(( budget - ($(date +%s) - start) )); }
sweep() { echo "+ dsx sweep $*" >>"$log"; timeout -s INT "$(left)" python3 -m dsx sweep "$@" >>"$log" 2>&1; echo "exit $?" >>"$log"; }

sweep --model bert-base --zero 1 --micro-batch 64 --steps 5 --warmup 2 --one-at-a-time \
  --vary vocab_size=15000 --vary seq_len=256 --vary num_hidden_layers=6 --vary hidden_size=384 \
  --vary intermediate_size=1536 --trial-timeout 200 --results "$dir/bert_effects.jsonl"
sweep --model gpt2-xl --zero 1,2,3 --offload none,cpu --act-ckpt off,on --micro-batch auto --mb-start 8 \
  --mb-max 128 --mb-tolerance 0.5 --steps 3 --warmup 2 --trial-timeout 300 --results "$dir/gpt2xl.jsonl"

cp "$dir"/*.jsonl "$out"/
grep -E "^\+|^exit|^\[|^sweep|fits up|seconds|^ops|^torch" "$log"
